# SPDX-License-Identifier: Apache-2.0
"""sriov ADD on the simulated host: each step read back from the real netns.

In-process (``plugin_funcs(make_deps, make_ipam).add(args)`` with the
production deps of a lab and a FakeIpam), so each test costs one lab (~0.2 s).
State is read back through ``ip -j`` and the recorded PF-side VF table, not
through our adapters.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cni.errors import (
    DEVICE_ERROR,
    GATEWAY_UNREACHABLE,
    INVALID_CONFIG,
    IP_CONFLICT,
    CniError,
)
from cni.plugins.sriov import commands
from cni.types import Result
from tests.doubles.fake_ipam import FakePool
from tests.doubles.sriov_lab import (
    Harness,
    addresses,
    link,
    netns_name,
    routes,
    rules,
    vf_table,
)

pytestmark = pytest.mark.kernel


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    with Harness.up(tmp_path, rails=2) as harness:
        yield harness


def add(
    h: Harness,
    conf: dict[str, Any],
    netns: str,
    ifname: str = "net1",
    cid: str = "c1",
    cni_args: str = "",
) -> Result:
    args = h.args("ADD", conf, netns, ifname, cid, cni_args)
    return h.funcs(commands).add(args)


def delete(
    h: Harness, conf: dict[str, Any], netns: str, ifname: str = "net1", cid: str = "c1"
) -> None:
    args = h.args("DEL", conf, netns, ifname, cid)
    h.funcs(commands).del_(args)


def test_add_moves_the_vf_into_the_pod_renamed_up_and_addressed(h: Harness) -> None:
    pod, vf = h.pod(), h.vf()
    res = add(h, h.conf(), pod)
    assert link(vf.netdev) is None  # gone from the host
    pod_link = link("net1", pod)
    assert pod_link is not None and "UP" in pod_link["flags"]
    assert addresses("net1", pod) == ["172.16.11.1/24"]
    out = res.to_json("1.1.0")
    assert out["interfaces"] == [
        {
            "name": "net1",
            "mac": pod_link["address"],
            "mtu": 1500,
            "sandbox": pod,
            "pciID": vf.pci,
        }
    ]
    assert out["ips"] == [
        {"interface": 0, "address": "172.16.11.1/24", "gateway": "172.16.11.254"}
    ]


def test_add_reports_the_pci_id_in_a_1_1_0_result(h: Harness) -> None:
    res = add(h, h.conf(cniVersion="1.1.0"), h.pod())
    assert res.to_json("1.1.0")["interfaces"][0]["pciID"] == h.vf().pci


def test_add_drops_the_old_host_name_altname(h: Harness) -> None:
    pod, vf = h.pod(), h.vf()
    subprocess.run(
        ["ip", "link", "property", "add", "dev", vf.netdev, "altname", f"{vf.netdev}x"],
        check=True,
    )
    add(h, h.conf(), pod)
    pod_link = link("net1", pod)
    assert pod_link is not None
    assert vf.netdev not in pod_link.get("altnames", [])


def test_add_sets_the_mac_on_the_pf_and_on_the_netdev(h: Harness) -> None:
    pod, vf, rail = h.pod(), h.vf(), h.rail()
    add(h, h.conf(mac="02:11:22:33:44:55"), pod)
    assert link("net1", pod)["address"] == "02:11:22:33:44:55"  # type: ignore[index]
    assert vf_table(h.lab, rail.pf_netdev, vf.index)["mac"] == "02:11:22:33:44:55"


def test_runtime_config_mac_wins_over_cni_args_mac(h: Harness) -> None:
    pod = h.pod()
    conf = h.conf(runtimeConfig={"mac": "02:00:00:00:00:aa"})
    add(h, conf, pod, cni_args="IgnoreUnknown=true;MAC=02:00:00:00:00:bb")
    assert link("net1", pod)["address"] == "02:00:00:00:00:aa"  # type: ignore[index]


def test_add_applies_every_pf_side_setting(h: Harness) -> None:
    vf, rail = h.vf(), h.rail()
    conf = h.conf(
        vlan=100,
        vlanQoS=3,
        spoofchk="off",
        trust="on",
        link_state="enable",
        min_tx_rate=10,
        max_tx_rate=1000,
    )
    add(h, conf, h.pod())
    entry = vf_table(h.lab, rail.pf_netdev, vf.index)
    assert (entry["vlan"], entry["qos"], entry["vlan_proto"]) == (100, 3, 0x8100)
    assert (entry["spoofchk"], entry["trust"], entry["link_state"]) == (False, True, 1)
    assert (entry["min_tx_rate"], entry["max_tx_rate"]) == (10, 1000)


def test_add_sets_the_netconf_mtu(h: Harness) -> None:
    pod = h.pod()
    res = add(h, h.conf(mtu=4200), pod)
    assert link("net1", pod)["mtu"] == 4200  # type: ignore[index]
    assert res.interfaces[0].mtu == 4200


def test_add_rejects_an_mtu_above_the_pf_mtu_before_any_change(h: Harness) -> None:
    pod, vf, rail = h.pod(), h.vf(), h.rail()
    with pytest.raises(CniError) as info:
        add(h, h.conf(mtu=rail.pf_mtu + 1), pod)
    assert info.value.code == INVALID_CONFIG
    assert f"mtu {rail.pf_mtu + 1} is above the MTU of PF {rail.pf_netdev}" in (
        info.value.msg
    )
    assert link(vf.netdev) is not None and h.ipam.held == {}


def test_add_installs_per_nic_table_rule_and_default_route(h: Harness) -> None:
    pod = h.pod()
    add(h, h.conf(), pod)
    rule = [r for r in rules(pod) if r.get("src") == "172.16.11.1"]
    assert rule == [{"priority": 900, "src": "172.16.11.1", "table": "101"}]
    table = {(r["dst"], r.get("gateway")) for r in routes(pod, "101")}
    assert table == {("default", "172.16.11.254"), ("172.16.11.0/24", None)}
    # The pod's main table gets no default route through the rail.
    assert [r for r in routes(pod, "main") if r["dst"] == "default"] == []


def test_explicit_route_table_and_rule_priority_are_used(h: Harness) -> None:
    pod = h.pod()
    add(h, h.conf(routeTable=5000, rulePriority=555), pod)
    assert {"priority": 555, "src": "172.16.11.1", "table": "5000"} in rules(pod)
    assert routes(pod, "5000")


def test_pod_default_route_nic_puts_the_default_route_in_main(h: Harness) -> None:
    pod = h.pod()
    add(h, h.conf(podDefaultRouteNIC="net1"), pod)
    main = [r for r in routes(pod, "main") if r["dst"] == "default"]
    assert [(r["gateway"], r["dev"]) for r in main] == [("172.16.11.254", "net1")]


def give_pod_an_eth0(pod: str) -> None:
    """eth0 with 10.99.0.2/24 and the pod's default route via 10.99.0.1."""
    ns = netns_name(pod)
    for cmd in (
        "link add eth0 type veth peer name eth0p",
        "addr add 10.99.0.2/24 dev eth0",
        "link set eth0p up",
        "link set eth0 up",
        "route add default via 10.99.0.1 dev eth0",
    ):
        subprocess.run(["ip", "-n", ns, *cmd.split()], check=True)


def test_pod_default_route_nic_keeps_replies_from_eth0_on_eth0(h: Harness) -> None:
    pod = h.pod()
    give_pod_an_eth0(pod)
    conf = h.conf(podDefaultRouteNIC="net1")
    add(h, conf, pod)
    main = [r for r in routes(pod, "main") if r["dst"] == "default"]
    assert [(r["gateway"], r["dev"]) for r in main] == [("172.16.11.254", "net1")]
    [eth0_rule] = [r for r in rules(pod) if r.get("src") == "10.99.0.2"]
    assert eth0_rule["priority"] == 900 and eth0_rule["table"] != "101"
    eth0_table = routes(pod, eth0_rule["table"])
    assert [(r["dst"], r["gateway"], r["dev"]) for r in eth0_table] == [
        ("default", "10.99.0.1", "eth0")
    ]
    # What the kernel picks for a reply from eth0's address (independent path).
    got = subprocess.run(
        [
            "ip",
            "-n",
            netns_name(pod),
            "-j",
            "route",
            "get",
            "8.8.8.8",
            "from",
            "10.99.0.2",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert '"dev":"eth0"' in got.replace(" ", "")
    delete(h, conf, pod)
    assert [r for r in rules(pod) if r.get("src") == "10.99.0.2"] == []
    assert routes(pod, eth0_rule["table"]) == []
    main = [r for r in routes(pod, "main") if r["dst"] == "default"]
    assert [(r["gateway"], r["dev"]) for r in main] == [("10.99.0.1", "eth0")]


def test_policy_routing_can_be_switched_off(h: Harness) -> None:
    pod = h.pod()
    add(h, h.conf(policyRouting=False), pod)
    assert [r for r in rules(pod) if r.get("src") == "172.16.11.1"] == []


def test_dual_stack_gets_ipv6_address_rule_and_table(h: Harness) -> None:
    pod = h.pod()
    add(h, h.conf(v6=True), pod)
    assert set(addresses("net1", pod)) == {"172.16.11.1/24", "fd00:11::1/64"}
    assert {"priority": 900, "src": "fd00:11::1", "table": "101"} in rules(pod, "-6")
    six = {(r["dst"], r.get("gateway")) for r in routes(pod, "101", "-6")}
    assert ("default", "fd00:11::fe") in six and ("fd00:11::/64", None) in six


def test_pool_routes_go_into_the_nic_table(h: Harness) -> None:
    from cni.ipam import IpamRoute

    r = h.rail()
    h.ipam.add_pool(
        FakePool(
            r.pool_v4,
            r.subnet_v4,
            "172.16.11.1",
            "172.16.11.200",
            r.gateway_v4,
            (IpamRoute("10.99.0.0/16"),),
        )
    )
    pod = h.pod()
    res = add(h, h.conf(), pod)
    assert ("10.99.0.0/16", "172.16.11.254") in {
        (x["dst"], x.get("gateway")) for x in routes(pod, "101")
    }
    assert [str(x.dst) for x in res.routes] == ["10.99.0.0/16"]


def test_add_refuses_a_vf_held_by_a_live_netns(h: Harness) -> None:
    first, second = h.pod(), h.pod()
    add(h, h.conf(), first)
    with pytest.raises(CniError) as info:
        add(h, h.conf(), second, cid="c2")
    assert info.value.code == DEVICE_ERROR
    assert info.value.msg == f"pci address {h.vf().pci} is already allocated"
    assert link("net1", first) is not None and link("net1", second) is None


def test_add_clears_a_stale_allocation_whose_netns_is_gone(h: Harness) -> None:
    marker = h.state_dir / "pci" / h.vf().pci
    marker.parent.mkdir(parents=True)
    marker.write_text("/var/run/netns/rv-gone-long-ago")
    pod = h.pod()
    add(h, h.conf(), pod)
    assert marker.read_text() == pod


def test_ip_conflict_fails_naming_ip_and_mac_and_releases(h: Harness) -> None:
    r, vf = h.rail(), h.vf()
    fabric = r.fabric_netns
    subprocess.run(
        ["ip", "-n", fabric, "addr", "add", "172.16.11.1/24", "dev", r.bridge],
        check=True,
    )
    bridge_mac = link(r.bridge, f"/var/run/netns/{fabric}")["address"]  # type: ignore[index]
    with pytest.raises(CniError) as info:
        add(h, h.conf(), h.pod())
    assert info.value.code == IP_CONFLICT
    assert "172.16.11.1" in info.value.msg and bridge_mac in info.value.msg
    assert h.ipam.held == {} and link(vf.netdev) is not None


def test_ip_conflict_check_can_be_switched_off(h: Harness) -> None:
    r = h.rail()
    subprocess.run(
        ["ip", "-n", r.fabric_netns, "addr", "add", "172.16.11.1/24", "dev", r.bridge],
        check=True,
    )
    pod = h.pod()
    # The gateway check is off too: the bridge owning 172.16.11.1 itself
    # ignores ARP requests sent from that address.
    add(h, h.conf(detectIPConflict=False, detectGateway=False), pod)
    assert addresses("net1", pod) == ["172.16.11.1/24"]


def test_silent_gateway_fails_naming_it_and_releases(h: Harness) -> None:
    r, vf = h.rail(), h.vf()
    h.ipam.add_pool(
        FakePool(
            r.pool_v4, r.subnet_v4, "172.16.11.1", "172.16.11.200", "172.16.11.253"
        )
    )
    with pytest.raises(CniError) as info:
        add(h, h.conf(), h.pod())
    assert info.value.code == GATEWAY_UNREACHABLE
    assert info.value.msg == "gateway 172.16.11.253 is unreachable"
    assert h.ipam.held == {} and link(vf.netdev) is not None


def test_gateway_check_can_be_switched_off(h: Harness) -> None:
    r = h.rail()
    h.ipam.add_pool(
        FakePool(
            r.pool_v4, r.subnet_v4, "172.16.11.1", "172.16.11.200", "172.16.11.253"
        )
    )
    pod = h.pod()
    add(h, h.conf(detectGateway=False), pod)
    assert addresses("net1", pod) == ["172.16.11.1/24"]


def test_add_without_ipam_attaches_the_vf_without_addresses(h: Harness) -> None:
    pod = h.pod()
    conf = h.conf()
    del conf["ipam"]
    res = add(h, conf, pod)
    assert addresses("net1", pod) == [] and res.ips == []


def test_add_fails_when_the_pod_already_has_the_ifname(h: Harness) -> None:
    pod, vf = h.pod(), h.vf()
    subprocess.run(
        [
            "ip",
            "-n",
            netns_name(pod),
            "link",
            "add",
            "net1",
            "type",
            "veth",
            "peer",
            "name",
            "rvpeer",
        ],
        check=True,
    )
    with pytest.raises(CniError) as info:
        add(h, h.conf(), pod)
    assert info.value.code == DEVICE_ERROR and "net1 already exists" in (
        info.value.details
    )
    assert link(vf.netdev) is not None and h.ipam.held == {}


def test_pod_default_route_nic_keeps_eth0_replies_for_ipv6_too(h: Harness) -> None:
    pod = h.pod()
    give_pod_an_eth0(pod)
    ns = netns_name(pod)
    for cmd in (
        "-6 addr add fd99::2/64 dev eth0 nodad",
        "-6 route add default via fd99::1 dev eth0",
    ):
        subprocess.run(["ip", "-n", ns, *cmd.split()], check=True)
    conf = h.conf(v6=True, podDefaultRouteNIC="net1")
    add(h, conf, pod)
    [rule6] = [r for r in rules(pod, "-6") if r.get("src") == "fd99::2"]
    [rule4] = [r for r in rules(pod) if r.get("src") == "10.99.0.2"]
    assert rule6["table"] == rule4["table"]  # one table for eth0, both families
    six = routes(pod, rule6["table"], "-6")
    assert [(r["dst"], r["gateway"], r["dev"]) for r in six] == [
        ("default", "fd99::1", "eth0")
    ]
    main6 = [r for r in routes(pod, "main", "-6") if r["dst"] == "default"]
    assert [(r["gateway"], r["dev"]) for r in main6] == [("fd00:11::fe", "net1")]
    delete(h, conf, pod)
    assert [r for r in rules(pod, "-6") if r.get("src") == "fd99::2"] == []
    main6 = [r for r in routes(pod, "main", "-6") if r["dst"] == "default"]
    assert [(r["gateway"], r["dev"]) for r in main6] == [("fd99::1", "eth0")]
