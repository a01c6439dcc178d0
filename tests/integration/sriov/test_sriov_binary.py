# SPDX-License-Identifier: Apache-2.0
"""The real ``railyard-sriov`` binary on the simulated host with a real ipamd.

One 8-rail lab and one ipamd (SQLite in the lab dir) per module; every test
uses its own pod netns and container IDs, and DELs what it ADDed, so the tests
stay independent. Conflists run through ``railyard_sim.runtime`` (libcni-like),
with the plugins under their CNI type names and Debian's ``tuning``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from railyard_sim import daemon
from railyard_sim.lab import Lab
from railyard_sim.runtime import (
    DEBIAN_BIN,
    Attachment,
    PluginError,
    Runtime,
    plugin_bin_dir,
)
from tests.doubles.lab_ipamd import lab_with_ipamd
from tests.doubles.sriov_lab import addresses, link, netns_name, routes, rules

pytestmark = pytest.mark.integration

K8S_ARGS = {
    "IgnoreUnknown": "true",
    "K8S_POD_NAMESPACE": "ai",
    "K8S_POD_NAME": "trainer-0",
    "K8S_POD_INFRA_CONTAINER_ID": "sandbox",
    "K8S_POD_UID": "0b8f1f3e-1111-2222-3333-444455556666",
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab_with_ipamd(
        tmp_path_factory.mktemp("sriov-bin"), rails=8, vfs_per_pf=2
    ) as lab:
        yield lab


@pytest.fixture(scope="module")
def runtime(lab: Lab) -> Runtime:
    env = {
        **daemon.client_env(lab.dir),
        "RAILYARD_STATE_DIR": str(lab.dir / "plugin-state"),
        "RAILYARD_NODE_NAME": "node1",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    bins = plugin_bin_dir(lab.dir)
    return Runtime([bins, DEBIAN_BIN], env=env, cache_dir=lab.dir / "runtime-cache")


@pytest.fixture
def pod(lab: Lab) -> Iterator[str]:
    name = lab.netns_name(f"p{os.urandom(3).hex()}")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield f"/var/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def sriov_conflist(
    lab: Lab,
    rail: int,
    vf: int = 0,
    v6: bool = True,
    rdma: bool = False,
    **sriov: Any,
) -> dict[str, Any]:
    """Spiderpool's rendered SpiderMultusConfig conflist plus multus' deviceID:
    ``[sriov, rdma?, tuning]``."""
    r = lab.rail(rail)
    pci = r.vfs[vf].pci
    ipam: dict[str, Any] = {"type": "spiderpool", "default_ipv4_ippool": [r.pool_v4]}
    if v6:
        ipam["default_ipv6_ippool"] = [r.pool_v6]
    plugin = {
        "vlan": 0,
        "min_tx_rate": 0,
        "max_tx_rate": 0,
        "type": "sriov",
        "ipam": ipam,
        **sriov,
    }
    plugins = [
        plugin,
        *([{"type": "rdma"}] if rdma else []),
        {"type": "tuning", "mtu": 4200},
    ]
    for p in plugins:
        p.update(deviceID=pci, pciBusID=pci)
    return {"cniVersion": "0.3.1", "name": f"gpu{rail}-sriov", "plugins": plugins}


def ping(netns: str, ifname: str, dst: str) -> bool:
    # busybox-static's ping: iputils is not installed on the CI image.
    cmd = [
        "ip",
        "netns",
        "exec",
        netns_name(netns),
        "busybox",
        "ping",
        "-c1",
        "-W1",
        "-I",
        ifname,
        dst,
    ]
    return subprocess.run(cmd, capture_output=True, check=False).returncode == 0


def test_spiderpool_rendered_conflist_with_rdma_and_tuning_works_unchanged(
    lab: Lab, runtime: Runtime, pod: str
) -> None:
    from railyard_sim.recording import RecordingRdmaOps

    vf = lab.rail(1).vfs[0]
    host_before = link(vf.netdev)
    conf = sriov_conflist(lab, 1, rdma=True)
    att = Attachment("cspider", pod, "net1", args=K8S_ARGS)
    result = runtime.add(conf, att)
    assert result["interfaces"][0]["name"] == "net1"
    assert link("net1", pod)["mtu"] == 4200  # type: ignore[index]
    v4 = [ip["address"] for ip in result["ips"] if ip["version"] == "4"]
    assert v4 and v4[0].startswith("172.16.11.")
    assert vf.rdma in RecordingRdmaOps(lab.dir).devices(pod)  # the chained rdma
    runtime.delete(conf, att)
    assert vf.rdma in RecordingRdmaOps(lab.dir).devices(None)
    after = link(vf.netdev)
    assert after is not None and host_before is not None
    assert (after["mtu"], after["address"]) == (
        host_before["mtu"],
        host_before["address"],
    )


def test_eight_nic_pod_dual_stack_with_per_rail_tables(
    lab: Lab, runtime: Runtime, pod: str
) -> None:
    confs = [sriov_conflist(lab, n, vf=1) for n in range(1, 9)]
    atts = [Attachment("c8nic", pod, f"net{n}", args=K8S_ARGS) for n in range(1, 9)]
    # Attach in reverse order: tables depend on the NIC name only.
    for conf, att in reversed(list(zip(confs, atts, strict=True))):
        runtime.add(conf, att)
    try:
        v4_rules = {r["src"]: r["table"] for r in rules(pod) if "src" in r}
        v6_rules = {r["src"]: r["table"] for r in rules(pod, "-6") if "src" in r}
        for n in range(1, 9):
            ifname = f"net{n}"
            addrs = addresses(ifname, pod)
            v4 = next(a for a in addrs if "." in a).split("/")[0]
            v6 = next(a for a in addrs if ":" in a).split("/")[0]
            assert v4.startswith(f"172.16.1{n}.") and v6.startswith(f"fd00:1{n}::")
            assert v4_rules[v4] == v6_rules[v6] == str(100 + n)
            assert ("default", f"172.16.1{n}.254") in {
                (x["dst"], x.get("gateway")) for x in routes(pod, str(100 + n))
            }
            assert ping(pod, ifname, f"172.16.1{n}.254")
            assert ping(pod, ifname, f"fd00:1{n}::fe")
        # The pod's main table has no rail default route.
        assert [x for x in routes(pod, "main") if x["dst"] == "default"] == []
    finally:
        for conf, att in zip(confs, atts, strict=True):
            runtime.delete(conf, att)
    for n in range(1, 9):
        assert link(lab.rail(n).vfs[1].netdev) is not None


def test_a_nic_cannot_reach_across_to_another_rails_table(
    lab: Lab, runtime: Runtime, pod: str
) -> None:
    confs = [sriov_conflist(lab, n, vf=0, v6=False) for n in (1, 2)]
    atts = [Attachment("cross", pod, f"net{n}", args=K8S_ARGS) for n in (1, 2)]
    for conf, att in zip(confs, atts, strict=True):
        runtime.add(conf, att)
    try:
        net1_ip = addresses("net1", pod)[0].split("/")[0]
        got = subprocess.run(
            [
                "ip",
                "-n",
                netns_name(pod),
                "-j",
                "route",
                "get",
                "172.16.12.254",
                "from",
                net1_ip,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        route = json.loads(got.stdout)[0]
        # From net1's address, rail 2's gateway is only reachable through
        # rail 1's own gateway, never directly through net2.
        assert (route["dev"], route.get("gateway")) == ("net1", "172.16.11.254")
        assert route.get("table") == "101"
        # And rail 2's gateway does not answer through net1 (L2-separate rails).
        assert not ping(pod, "net1", "172.16.12.254")
    finally:
        for conf, att in zip(confs, atts, strict=True):
            runtime.delete(conf, att)


def test_binary_reports_a_config_error_as_cni_json_code_7(
    lab: Lab, runtime: Runtime, pod: str
) -> None:
    conf = sriov_conflist(lab, 1, vlan=5000)
    with pytest.raises(PluginError) as info:
        runtime.add(conf, Attachment("cbad", pod, "net1", args=K8S_ARGS))
    assert info.value.code == 7
    assert info.value.msg == (
        "LoadConf(): vlan id 5000 invalid: value must be in the range 0-4094"
    )


def test_status_is_50_when_ipamd_is_unreachable(lab: Lab, runtime: Runtime) -> None:
    conf = sriov_conflist(lab, 1)
    conf["cniVersion"] = "1.1.0"
    conf["plugins"] = conf["plugins"][:1]
    conf["plugins"][0]["ipam"]["socket"] = str(lab.dir / "nobody-listens.sock")
    with pytest.raises(PluginError) as info:
        runtime.status(conf)
    assert info.value.code == 50
    conf["plugins"][0]["ipam"].pop("socket")
    runtime.status(conf)  # the lab's ipamd is up: no error


def test_add_with_host_local_ipam_is_delegated_per_spec(
    lab: Lab, runtime: Runtime, pod: str, tmp_path: Path
) -> None:
    conf = sriov_conflist(lab, 3, v6=False)
    conf["cniVersion"] = "1.0.0"
    conf["plugins"] = conf["plugins"][:1]
    conf["plugins"][0]["ipam"] = {
        "type": "host-local",
        "dataDir": str(tmp_path / "host-local"),
        "ranges": [
            [
                {
                    "subnet": "172.16.13.0/24",
                    "rangeStart": "172.16.13.201",
                    "rangeEnd": "172.16.13.210",
                    "gateway": "172.16.13.254",
                }
            ]
        ],
    }
    att = Attachment("chl", pod, "net3", args=K8S_ARGS)
    result = runtime.add(conf, att)
    assert result["ips"][0]["address"] == "172.16.13.201/24"
    runtime.delete(conf, att)
    assert not list((tmp_path / "host-local").rglob("172.16.13.201"))
