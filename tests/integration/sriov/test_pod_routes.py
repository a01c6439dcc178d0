# SPDX-License-Identifier: Apache-2.0
"""Routes keep their meaning when a rail takes the pod's default route, and
cluster traffic stays on eth0, through the lab agent's shims with ipamd.

The pod's eth0 is Calico's layout: a /32, ``default via 169.254.1.1 dev eth0
onlink`` (no route to the gateway: only the flag makes it valid) with a
metric, an MTU, an advmss and ``proto static``, and another route through
the same gateway. Its peer is a "cluster" netns holding the gateway and a
service IP (10.96.0.10).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cni.errors import INVALID_CONFIG
from railyard_sim.lab import Lab
from railyard_sim.runtime import Attachment, PluginError
from tests.doubles.lab_ipamd import allocations, lab_with_agent, warm_runtime
from tests.doubles.sriov_lab import addresses, link

pytestmark = pytest.mark.integration

SERVICE_IP = "10.96.0.10"
SERVICE_CIDR = "10.96.0.0/12"
ETH0 = "10.244.1.5"
GATEWAY = "169.254.1.1"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("i22routes")
    with lab_with_agent(root, rails=2, vfs_per_pf=1) as built:
        yield built


def ip(netns: str, *args: str) -> str:
    return subprocess.run(
        ["ip", "-n", netns, *args], check=True, capture_output=True, text=True
    ).stdout


def ip_json(netns: str, *args: str) -> Any:
    return json.loads(ip(netns, "-j", "-d", *args) or "[]")


@pytest.fixture
def pod(lab: Lab) -> Iterator[str]:
    """A pod netns with a Calico-like eth0 whose peer is a cluster netns."""
    name, cluster = lab.netns_name("r"), lab.netns_name("k")
    for ns in (name, cluster):
        subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for cmd in (
            f"link add eth0 type veth peer name cali0 netns {cluster}",
            f"addr add {ETH0}/32 dev eth0",
            "link set eth0 up",
            f"route add default via {GATEWAY} dev eth0 onlink proto static "
            "metric 100 mtu 1450 advmss 1410",
            f"route add 10.0.0.0/8 via {GATEWAY} dev eth0 onlink proto static",
        ):
            ip(name, *cmd.split())
        for cmd in (
            f"addr add {GATEWAY}/32 dev cali0",
            "link set cali0 up",
            "link set lo up",
            f"addr add {SERVICE_IP}/32 dev lo",
            f"route add {ETH0}/32 dev cali0",
            # replies to the rails' addresses, through the pod's eth0
            f"route add 172.16.0.0/12 via {ETH0} dev cali0 onlink",
        ):
            ip(cluster, *cmd.split())
        yield name
    finally:
        for ns in (name, cluster):
            subprocess.run(["ip", "netns", "del", ns], check=False)


def rail_conf(lab: Lab, rail: int, **extra: Any) -> dict[str, Any]:
    r = lab.rail(rail)
    plugin = {
        "type": "sriov",
        "deviceID": r.vfs[0].pci,
        "ipam": {"type": "spiderpool", "default_ipv4_ippool": [r.pool_v4]},
        **extra,
    }
    return {"cniVersion": "1.0.0", "name": f"rail{rail}", "plugins": [plugin]}


def route_view(netns: str) -> list[Any]:
    """Every route of every table and every rule, as the kernel shows them."""
    return [ip_json(netns, "route", "show", "table", "all"), ip_json(netns, "rule")]


def one(routes: list[dict[str, Any]], dst: str) -> dict[str, Any]:
    (found,) = [r for r in routes if r["dst"] == dst]
    return found


def test_default_route_on_net1_keeps_eth0s_routes_and_cluster_traffic_on_eth0(
    lab: Lab, pod: str, tmp_path: Path
) -> None:
    rt = warm_runtime(lab, tmp_path)
    before = route_view(pod)
    extra = {"podDefaultRouteNIC": "net1", "hijackCIDR": [SERVICE_CIDR]}
    confs = [rail_conf(lab, n, **extra) for n in (1, 2)]
    atts = [Attachment("croutes", f"/var/run/netns/{pod}", f"net{n}") for n in (1, 2)]
    for conf, att in zip(confs, atts, strict=True):
        rt.add(conf, att)

    main = ip_json(pod, "route", "show", "table", "main")
    default = one(main, "default")
    assert (default["gateway"], default["dev"]) == ("172.16.11.254", "net1")
    service = one(main, SERVICE_CIDR)
    assert (service["gateway"], service["dev"], service["flags"]) == (
        GATEWAY, "eth0", ["onlink"]
    )  # fmt: skip
    assert one(main, "10.0.0.0/8")["dev"] == "eth0"  # untouched

    # eth0's default and its sibling moved into eth0's table with every attribute
    (eth0_rule,) = [r for r in ip_json(pod, "rule") if r.get("src") == ETH0]
    eth0_table = ip_json(pod, "route", "show", "table", str(eth0_rule["table"]))
    moved = one(eth0_table, "default")
    assert moved["gateway"] == GATEWAY and moved["flags"] == ["onlink"]
    assert (moved["protocol"], moved["metric"]) == ("static", 100)
    assert moved["metrics"] == [{"mtu": 1450, "advmss": 1410}]
    assert one(eth0_table, "10.0.0.0/8")["flags"] == ["onlink"]

    # from any of the pod's addresses a service IP leaves through eth0
    for ifname, table in (("net1", "101"), ("net2", "102")):
        assert (
            one(ip_json(pod, "route", "show", "table", table), SERVICE_CIDR)["dev"]
            == "eth0"
        )
        (address,) = addresses(ifname, f"/var/run/netns/{pod}")
        src = address.split("/")[0]
        (got,) = ip_json(pod, "route", "get", SERVICE_IP, "from", src)
        assert (got["dev"], got["gateway"]) == ("eth0", GATEWAY)
        ping = [shutil.which("ping")] if shutil.which("ping") else ["busybox", "ping"]
        subprocess.run(
            ["ip", "netns", "exec", pod, *ping, "-c1", "-W2", "-I", src, SERVICE_IP],
            check=True, capture_output=True,
        )  # fmt: skip

    for conf, att in reversed(list(zip(confs, atts, strict=True))):
        rt.delete(conf, att)
    assert route_view(pod) == before  # every route and rule exactly as it was


def test_a_default_route_nic_no_nic_of_the_pod_takes_is_refused(
    lab: Lab, pod: str, tmp_path: Path
) -> None:
    rt = warm_runtime(lab, tmp_path)
    before = route_view(pod)
    conf = rail_conf(lab, 1, podDefaultRouteNIC="net9")
    att = Attachment("cnet9", f"/var/run/netns/{pod}", "net1")
    with pytest.raises(PluginError) as err:
        rt.add(conf, att)
    assert err.value.code == INVALID_CONFIG
    assert err.value.msg == "podDefaultRouteNIC net9 is not in the pod"
    assert "net1 is being attached and the pod has eth0" in err.value.details
    rt.delete(conf, att)
    assert link(lab.rail(1).vfs[0].netdev) is not None  # never left the host
    assert route_view(pod) == before
    assert allocations(lab) == []
