# SPDX-License-Identifier: Apache-2.0
"""The reference guide's last step: RDMA traffic between two pods, in CI.

Two pods attached by Railyard's own plugins through the lab's railyard-agent
(sriov on a netdevsim PF: the kernel keeps the VF table), then RDMA between
them with perftest and ibv_rc_pingpong over soft-RoCE. On 6.1, rxe routes and
listens in the initial netns only, so the traffic runs in shared mode over
one host rxe device, the pods' own links carrying the tools' out-of-band
exchange; RDMA over a VF netdev inside a pod needs hardware. In exclusive
mode the rdma plugin moves a VF's RDMA device (a test-build rxe under the
VF's device name) into the pod and back.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from cni.kernel.rdma import NetlinkRdmaOps
from railyard_sim import pods
from railyard_sim.lab import Lab
from railyard_sim.runtime import Attachment
from tests.realkernel.conftest import movable_rxe, rdma_links, set_rdma_netns_mode, sh

ITERS = 200
HOST_ADDRESS = "192.168.251.1/24"  # the rxe netdev's: its GID


def ipv4_gid_index(dev: str, timeout: float = 20) -> int:
    """The index of the device's IPv4-mapped GID (RoCE v2 from the host address)."""
    gids = Path(f"/sys/class/infiniband/{dev}/ports/1/gids")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in sorted(gids.iterdir(), key=lambda p: int(p.name)):
            if entry.read_text().strip().startswith("0000:0000:0000:0000:0000:ffff:"):
                return int(entry.name)
        time.sleep(0.2)
    raise AssertionError(
        f"{dev} has no IPv4 GID: {[p.read_text() for p in gids.iterdir()]}"
    )


def listening(netns: str, port: int) -> bool:
    out = sh("ip", "netns", "exec", netns, "ss", "-Hltn", f"sport = :{port}").stdout
    return bool(out.strip())


def pair(
    server_ns: str, client_ns: str, argv: Sequence[str], port: int, server_ip: str
) -> tuple[str, str]:
    """Run ``argv`` as server in one pod and client in the other; both outputs."""
    server = subprocess.Popen(
        ["ip", "netns", "exec", server_ns, *argv],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not listening(server_ns, port):
            assert server.poll() is None, f"server ended: {server.communicate()[0]}"
            assert time.monotonic() < deadline, f"{argv[0]} server never listened"
            time.sleep(0.2)
        client = subprocess.run(
            ["ip", "netns", "exec", client_ns, *argv, server_ip],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        server_out = server.communicate(timeout=60)[0]
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    client_out = client.stdout + client.stderr
    assert client.returncode == 0 and server.returncode == 0, (
        f"{argv[0]}: client {client.returncode}\n{client_out}\n"
        f"server {server.returncode}\n{server_out}"
    )
    return server_out, client_out


def perftest_row(output: str, size: int) -> list[str]:
    """The result row of a perftest report: '#bytes #iterations <numbers>'."""
    rows = [line.split() for line in output.splitlines()]
    found = [r for r in rows if len(r) > 2 and r[0] == str(size) and r[1].isdigit()]
    assert found, output
    assert all(re.fullmatch(r"[\d.]+", cell) for cell in found[-1]), found[-1]
    print(" ".join(found[-1]))  # in the VM's log: the numbers of this run
    return found[-1]


@pytest.mark.realkernel
def test_two_pods_attached_by_railyard_exchange_rdma_traffic(
    node_lab: Lab, make_rxe: Callable[..., str]
) -> None:
    lab = node_lab
    a, b = pods.create(lab, "i25ra"), pods.create(lab, "i25rb")
    for pod in (a, b):
        pods.attach(lab, pod, nics=1, rdma=False, ipv6=False)
    [ip_a] = [
        str(ipaddress.ip_interface(ip["address"]).ip) for ip in a.nics[0].result["ips"]
    ]
    dev = make_rxe("i25rxt")
    sh("ip", "addr", "add", HOST_ADDRESS, "dev", f"{dev}n")
    gid = str(ipv4_gid_index(dev))
    assert NetlinkRdmaOps().netns_mode() == "shared"
    assert dev in NetlinkRdmaOps().devices(a.netns_path)

    pingpong = [
        "ibv_rc_pingpong",
        "-d",
        dev,
        "-g",
        gid,
        "-n",
        str(ITERS),
        "-p",
        "18515",
    ]
    for out in pair(a.netns, b.netns, pingpong, 18515, ip_a):
        assert re.search(rf"\b{ITERS} iters in [\d.]+ seconds", out), out

    send_bw = [
        "ib_send_bw",
        "-d",
        dev,
        "-x",
        gid,
        "-n",
        str(ITERS),
        "-s",
        "65536",
        "-F",
        "-p",
        "18516",
    ]
    _, client = pair(a.netns, b.netns, send_bw, 18516, ip_a)
    # Completions asserted: the report row of all 200 sends. The rates under
    # TCG say nothing about the code (and perftest's clock reads 0 there).
    assert perftest_row(client, 65536)[1] == str(ITERS)

    read_lat = [
        "ib_read_lat",
        "-d",
        dev,
        "-x",
        gid,
        "-n",
        str(ITERS),
        "-F",
        "-p",
        "18517",
    ]
    _, client = pair(a.netns, b.netns, read_lat, 18517, ip_a)
    assert perftest_row(client, 2)[1] == str(ITERS)

    for pod in (a, b):
        assert pods.detach(lab, pod) == []


@pytest.mark.realkernel(vm="exclusive")
def test_the_rdma_plugin_moves_a_vfs_rdma_device_into_the_pod_and_back(
    make_lab: Callable[..., Lab], make_rxe: Callable[..., str]
) -> None:
    set_rdma_netns_mode("exclusive")  # before the lab makes its namespaces
    lab = make_lab(rails=1, rdma=True)
    rail = lab.rails[0]
    vf = rail.vfs[0]
    dev = make_rxe(vf.rdma, movable_rxe())  # the VF's RDMA device, for real
    pod = pods.create(lab, "i25rx")
    conf = pods.conflist(rail, vf.pci, ipv6=False, rdma=True)
    assert [p["type"] for p in conf["plugins"]] == ["sriov", "rdma"]
    att = Attachment(pod.container_id, pod.netns_path, "net1", args=pods.cni_args(pod))
    rt = pods.runtime(lab)
    result = rt.add(conf, att)
    ops = NetlinkRdmaOps()
    assert dev not in ops.devices()
    assert ops.devices(pod.netns_path) == [dev] == rdma_links(pod.netns_path)
    rt.delete(conf, att, prev_result=result)
    assert dev in ops.devices() and ops.devices(pod.netns_path) == []
