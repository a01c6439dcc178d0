# SPDX-License-Identifier: Apache-2.0
"""podman 4.3 with its CNI network backend runs containers on our ``sriov``.

One CNI network per VF (podman has no device plugin: the conflist carries the
``deviceID``), joined with ``--network NAME:interface_name=netN``. podman gives
the plugins its environment on ADD only; its DEL runs in `podman container
cleanup` (started by conmon), so RAILYARD_* come from containers.conf
``[engine] env`` - see test_client_environment.py and packaging/clients/podman.sh.
"""

from __future__ import annotations

import ipaddress
import uuid

import pytest

from . import netview
from .assertions import assert_all_returned, assert_allocated, assert_rail_nic
from .host import SimHost, wait_for
from .runtimes import IMAGE, Podman

pytestmark = pytest.mark.integration


def rail_network(host: SimHost, rail_number: int) -> dict[str, object]:
    rail, vf = host.rail(rail_number), host.vf(rail_number, 0)
    return {
        "cniVersion": "1.0.0",
        "name": f"rp-{host.lab.id}-rail{rail_number}",
        "plugins": [
            {
                "type": "sriov",
                "deviceID": vf.pci,
                "ipam": {"type": "spiderpool", "default_ipv4_ippool": [rail.pool_v4]},
            }
        ],
    }


def podman_for(make_podman, host: SimHost, rails: int) -> tuple[Podman, list[str]]:
    podman = make_podman([host.cni_bin_dir], host.env)
    names = []
    for n in range(1, rails + 1):
        net = rail_network(host, n)
        podman.add_network(net)
        names.append(str(net["name"]))
    return podman, names


def test_podman_container_shows_its_sriov_nic_with_the_pool_address(
    make_host, make_podman
) -> None:
    host = make_host(rails=1)
    podman, (network,) = podman_for(make_podman, host, 1)

    out = podman(
        "run",
        "--rm",
        "--network",
        f"{network}:interface_name=net1",
        IMAGE,
        "ip",
        "addr",
        "show",
        "net1",
    )
    nic = netview.busybox_addrs(out.stdout)["net1"]
    rail = host.rail(1)
    assert len(nic.ipv4) == 1, nic
    assert ipaddress.ip_interface(nic.ipv4[0]).network == ipaddress.ip_network(
        rail.subnet_v4
    )
    assert nic.up

    # `run --rm` returns once the container is removed; conmon's cleanup
    # process may still be finishing the DEL
    assert_all_returned(host, within=10)


def test_podman_eight_nic_pod_gets_every_rail_and_returns_them_after_rm(
    make_host, make_podman
) -> None:
    host = make_host(rails=8)
    podman, networks = podman_for(make_podman, host, 8)
    name = f"rp{uuid.uuid4().hex[:8]}"
    args = ["run", "-d", "--rm", "--name", name]
    for n, network in enumerate(networks, start=1):
        args += ["--network", f"{network}:interface_name=net{n}"]
    podman(*args, IMAGE, "sleep", "120", timeout=120)
    try:
        inside = netview.busybox_addrs(podman("exec", name, "ip", "addr").stdout)
        sandbox = podman(
            "inspect", "--format", "{{.NetworkSettings.SandboxKey}}", name
        ).stdout.strip()
        cid = podman("inspect", "--format", "{{.Id}}", name).stdout.strip()
        expected = {}
        for n in range(1, 9):
            address = assert_rail_nic(
                host, sandbox, f"net{n}", host.rail(n), host.vf(n, 0)
            )
            # what the container itself sees is what the kernel holds
            assert inside[f"net{n}"].ipv4 == (address,)
            expected[f"net{n}"] = address
        assert_allocated(host, cid, expected)
        # eight NICs, eight distinct policy tables
        tables = {netview.source_rule_table(a, sandbox) for a in expected.values()}
        assert len(tables) == 8
    finally:
        podman("stop", "--time", "0", name, check=False, timeout=120)
    wait_for(lambda: not podman.exists(name), 60, "podman to remove the container")
    assert_all_returned(host, within=10)


def test_podman_run_whose_second_rail_fails_leaves_no_vf_or_address_behind(
    make_host, make_podman
) -> None:
    host = make_host(rails=2)
    podman, (good, _) = podman_for(make_podman, host, 2)
    broken = rail_network(host, 2)
    broken["name"] = f"rp-{host.lab.id}-nopool"
    broken["plugins"][0]["ipam"]["default_ipv4_ippool"] = ["no-such-pool"]
    podman.add_network(broken)

    out = podman(
        "run",
        "--rm",
        "--network",
        f"{good}:interface_name=net1",
        "--network",
        f"{broken['name']}:interface_name=net2",
        IMAGE,
        "true",
        check=False,
    )
    assert out.returncode != 0
    assert "no-such-pool" in out.stderr, out.stderr
    # podman sets networks up in Go map order (random): either rail 1 was
    # attached first and podman tore it down after rail 2 failed, or rail 2
    # failed first; in both cases the failing ADD rolled itself back
    assert_all_returned(host, within=10)
