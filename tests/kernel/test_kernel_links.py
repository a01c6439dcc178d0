# SPDX-License-Identifier: Apache-2.0
"""NetlinkLinks against real namespaces; state read back with ``ip -j``."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import replace

import pytest

from cni.kernel import (
    InvalidArgument,
    KernelError,
    LinkExists,
    LinkNotFound,
    NetnsNotFound,
    RouteSpec,
    RuleSpec,
)
from cni.kernel.links import NetlinkLinks
from tests.conftest import unique_name
from tests.kernel.conftest import Host, ip, ip_json, sh

pytestmark = pytest.mark.kernel


@pytest.fixture
def links(host: Host) -> Iterator[NetlinkLinks]:
    adapter = NetlinkLinks()
    try:
        yield adapter
    finally:
        adapter.close()


@pytest.fixture
def pod(host: Host) -> str:
    return host.make()


def veth(netns: str | None, peer_netns: str | None = None) -> tuple[str, str]:
    a, b = unique_name("rk"), unique_name("rk")
    ip(netns, "link", "add", a, "type", "veth", "peer", "name", b)
    if peer_netns:
        ip(netns, "link", "set", b, "netns", os.path.basename(peer_netns))
    return a, b


def link_json(netns: str | None, name: str) -> dict:
    return ip_json(netns, "-d", "link", "show", "dev", name)[0]


def test_get_reports_index_mac_mtu_kind_and_state(links, pod):
    a, _ = veth(pod)
    shown = link_json(pod, a)
    info = links.get(a, pod)
    assert (info.index, info.name, info.mac, info.mtu) == (
        shown["ifindex"],
        a,
        shown["address"],
        shown["mtu"],
    )
    assert info.kind == "veth"
    assert info.up is False
    assert info.link_type == 1


def test_get_missing_link_raises_link_not_found_and_find_returns_none(links, pod):
    with pytest.raises(LinkNotFound):
        links.get("rknothere", pod)
    assert links.find("rknothere", pod) is None


def test_list_names_every_link_of_the_netns(links, pod):
    a, b = veth(pod)
    assert {ln.name for ln in links.list(pod)} == {"lo", a, b}


def test_none_means_the_process_own_netns(links, host):
    a, _ = veth(None)
    assert links.get(a).index == link_json(None, a)["ifindex"]
    assert links.get(a, host.path).index == links.get(a).index


def test_set_up_and_down(links, pod):
    a, _ = veth(pod)
    links.set_up(a, pod)
    assert "UP" in link_json(pod, a)["flags"]
    assert links.get(a, pod).up
    links.set_down(a, pod)
    assert "UP" not in link_json(pod, a)["flags"]


def test_rename_keeps_the_index(links, pod):
    a, _ = veth(pod)
    index = links.get(a, pod).index
    new = unique_name("rk")
    links.rename(a, new, pod)
    assert link_json(pod, new)["ifindex"] == index
    assert links.find(a, pod) is None


def test_rename_onto_existing_name_raises_link_exists(links, pod):
    a, b = veth(pod)
    with pytest.raises(LinkExists):
        links.rename(a, b, pod)


def test_set_mtu_and_mtu_above_device_max_is_invalid_argument(links, pod):
    a, _ = veth(pod)
    links.set_mtu(a, 9000, pod)
    assert link_json(pod, a)["mtu"] == 9000
    with pytest.raises(InvalidArgument) as caught:
        links.set_mtu(a, link_json(pod, a)["max_mtu"] + 1, pod)
    assert link_json(pod, a)["mtu"] == 9000
    # The kernel's own reason (extended ack) follows the errno text.
    assert "Invalid argument (" in str(caught.value)
    assert "mtu" in str(caught.value).partition("(")[2].lower()


def test_set_mac(links, pod):
    a, _ = veth(pod)
    links.set_mac(a, "02:AA:BB:CC:DD:01", pod)
    assert link_json(pod, a)["address"] == "02:aa:bb:cc:dd:01"
    assert links.get(a, pod).mac == "02:aa:bb:cc:dd:01"


def test_altnames_are_listed_and_removed(links, pod):
    a, _ = veth(pod)
    alt = unique_name("rkalt")
    ip(pod, "link", "property", "add", "dev", a, "altname", alt)
    assert links.get(a, pod).altnames == (alt,)
    assert links.get(alt, pod).name == a  # the kernel resolves altnames too
    links.del_altname(a, alt, pod)
    assert "altnames" not in link_json(pod, a)
    assert links.get(a, pod).altnames == ()


def test_move_into_a_netns_and_back_to_the_own_netns(links, host, pod):
    a, _ = veth(None)
    links.move(a, pod)
    assert link_json(pod, a)["ifname"] == a
    assert a not in {x["ifname"] for x in ip_json(None, "link", "show")}
    links.move(a, None, netns=pod)
    assert link_json(None, a)["ifname"] == a
    assert a not in {x["ifname"] for x in ip_json(pod, "link", "show")}


def test_move_onto_a_taken_name_raises_link_exists_and_leaves_the_link(links, pod):
    a, _ = veth(None)
    ip(pod, "link", "add", a, "type", "veth", "peer", "name", unique_name("rk"))
    with pytest.raises(LinkExists):
        links.move(a, pod)
    assert link_json(None, a)["ifname"] == a


def test_move_renamed_to_a_fixed_name_moves_and_renames_in_one_request(links, pod):
    a, _ = veth(None)
    index = links.get(a).index
    sent = sum(links.requests.values())
    assert links.move_renamed(index, pod, "rknet1", None) == "rknet1"
    assert sum(links.requests.values()) == sent + 1
    assert link_json(pod, "rknet1")["ifname"] == "rknet1"
    assert a not in {x["ifname"] for x in ip_json(None, "link", "show")}


def test_move_renamed_arrives_as_the_new_name_when_the_old_one_is_taken(links, pod):
    a, _ = veth(None)
    ip(pod, "link", "add", a, "type", "veth", "peer", "name", unique_name("rk"))
    links.move_renamed(links.get(a).index, pod, "rknet1", None)
    assert link_json(pod, "rknet1")["ifname"] == "rknet1"


def test_move_renamed_onto_a_taken_new_name_fails_after_the_move(links, pod):
    # The kernel moves first and renames in the target: the refusal leaves the
    # link moved under its old name (what the attach code puts back).
    a, _ = veth(None)
    ip(pod, "link", "add", "rknet1", "type", "veth", "peer", "name", unique_name("rk"))
    with pytest.raises(LinkExists):
        links.move_renamed(links.get(a).index, pod, "rknet1", None)
    assert link_json(pod, a)["ifname"] == a


def test_missing_netns_is_netns_not_found_and_is_not_created(links, host):
    missing = f"/var/run/netns/{unique_name('rk')}"
    with pytest.raises(NetnsNotFound):
        links.get("lo", missing)
    with pytest.raises(NetnsNotFound):
        links.move("lo", missing)
    assert not os.path.exists(missing)


def test_a_plain_file_is_not_a_netns(links, tmp_path):
    fake = tmp_path / "netns"
    fake.write_text("")
    with pytest.raises(NetnsNotFound):
        links.list(str(fake))


def test_addresses_lists_global_v4_and_v6_only(links, pod):
    a, _ = veth(pod)
    links.set_up(a, pod)
    links.add_address(a, "172.16.99.5/24", pod)
    links.add_address(a, "fd00:99::5/64", pod, nodad=True)
    shown = {
        f"{x['local']}/{x['prefixlen']}"
        for x in link_addr(pod, a)
        if x["scope"] == "global"
    }
    assert shown == {"172.16.99.5/24", "fd00:99::5/64"}
    assert set(links.addresses(a, pod)) == shown  # no fe80:: link-local


def link_addr(netns: str, name: str) -> list[dict]:
    return ip_json(netns, "addr", "show", "dev", name)[0]["addr_info"]


def test_add_address_sets_the_ipv4_broadcast(links, pod):
    a, _ = veth(pod)
    links.add_address(a, "172.16.99.5/24", pod)
    assert link_addr(pod, a)[0]["broadcast"] == "172.16.99.255"


def test_add_address_noprefixroute_adds_no_subnet_route(links, pod):
    a, b = veth(pod)
    links.set_up(a, pod)
    links.add_address(a, "172.16.98.5/24", pod, noprefixroute=True)
    links.add_address(b, "172.16.97.5/24", pod)
    main = {r["dst"] for r in ip_json(pod, "route", "show", "table", "main")}
    assert "172.16.98.0/24" not in main
    assert "noprefixroute" in link_addr(pod, a)[0]


def test_add_same_address_twice_raises_link_exists(links, pod):
    a, _ = veth(pod)
    links.add_address(a, "172.16.99.5/24", pod)
    with pytest.raises(LinkExists) as err:
        links.add_address(a, "172.16.99.5/24", pod)
    assert err.value.errno == 17


def test_del_address_and_flush(links, pod):
    a, _ = veth(pod)
    links.add_address(a, "172.16.99.5/24", pod)
    links.add_address(a, "172.16.99.6/24", pod)
    links.add_address(a, "fd00:99::5/64", pod, nodad=True)
    links.del_address(a, "172.16.99.5/24", pod)
    assert "172.16.99.5" not in {x["local"] for x in link_addr(pod, a)}
    links.flush_addresses(a, pod)
    assert link_addr(pod, a) == [] or all(
        x["scope"] != "global" for x in link_addr(pod, a)
    )
    assert links.addresses(a, pod) == []


def test_del_missing_address_keeps_errno(links, pod):
    a, _ = veth(pod)
    with pytest.raises(KernelError) as err:
        links.del_address(a, "172.16.99.5/24", pod)
    assert err.value.errno == 99  # EADDRNOTAVAIL


def test_routes_in_a_table_round_trip(links, pod):
    a, _ = veth(pod)
    links.set_up(a, pod)
    links.add_address(a, "172.16.99.5/24", pod, noprefixroute=True)
    links.add_address(a, "fd00:99::5/64", pod, nodad=True, noprefixroute=True)
    subnet = RouteSpec(dst="172.16.99.0/24", dev=a, table=1011, src="172.16.99.5")
    default = RouteSpec(dst="0.0.0.0/0", gw="172.16.99.254", dev=a, table=1011)
    subnet6 = RouteSpec(dst="fd00:99::/64", dev=a, table=1011)
    default6 = RouteSpec(dst="::/0", gw="fd00:99::fe", dev=a, table=1011, mtu=1400)
    for route in (subnet, default, subnet6, default6):
        links.add_route(route, pod)
    shown = ip_json(pod, "route", "show", "table", "1011")
    assert {(r["dst"], r.get("gateway"), r["dev"]) for r in shown} == {
        ("172.16.99.0/24", None, a),
        ("default", "172.16.99.254", a),
    }
    shown6 = ip_json(pod, "-6", "route", "show", "table", "1011")
    assert ("default", "fd00:99::fe", [{"mtu": 1400}]) in [
        (r["dst"], r.get("gateway"), r.get("metrics")) for r in shown6
    ]
    got = {(r.dst, r.gw, r.dev, r.table, r.src) for r in links.routes(1011, 0, pod)}
    assert got == {
        ("172.16.99.0/24", None, a, 1011, "172.16.99.5"),
        ("0.0.0.0/0", "172.16.99.254", a, 1011, None),
        ("fd00:99::/64", None, a, 1011, None),
        ("::/0", "fd00:99::fe", a, 1011, None),
    }
    routes6 = {r.dst: r for r in links.routes(1011, socket.AF_INET6, pod)}
    assert set(routes6) == {"fd00:99::/64", "::/0"}
    assert routes6["::/0"].mtu == 1400
    links.del_route(default, pod)
    assert "default" not in {
        r["dst"] for r in ip_json(pod, "route", "show", "table", "1011")
    }


def test_an_onlink_route_with_its_protocol_reads_back_and_is_written_again(links, pod):
    a, _ = veth(pod)
    links.set_up(a, pod)
    links.add_address(a, "10.244.1.5/32", pod)
    ip(pod, "route", "add", "default", "via", "169.254.1.1", "dev", a, "onlink",
       "proto", "static", "metric", "100", "mtu", "1450", "advmss", "1410")  # fmt: skip
    (read,) = [r for r in links.routes(254, socket.AF_INET, pod) if r.gw]
    assert (read.onlink, read.protocol, read.metric, read.mtu, read.advmss) == (
        True, 4, 100, 1450, 1410
    )  # fmt: skip
    links.add_route(replace(read, table=1013), pod)  # refused without onlink
    (copy,) = ip_json(pod, "-d", "route", "show", "table", "1013")
    assert "onlink" in copy["flags"]  # (and linkdown: the peer is down)
    assert (copy["protocol"], copy["metric"]) == ("static", 100)
    links.del_route(read, pod)
    links.add_route(read, pod)  # restored as it was
    (back,) = [r for r in links.routes(254, socket.AF_INET, pod) if r.gw]
    assert back == read


def test_add_route_twice_raises_link_exists(links, pod):
    a, _ = veth(pod)
    links.set_up(a, pod)
    route = RouteSpec(dst="172.16.96.0/24", dev=a, table=1012)
    links.add_route(route, pod)
    with pytest.raises(LinkExists):
        links.add_route(route, pod)


def test_rules_with_priority(links, pod):
    rule4 = RuleSpec(src="172.16.99.5/32", table=1011, priority=1011)
    rule6 = RuleSpec(src="fd00:99::5/128", table=1011, priority=1011, family=10)
    links.add_rule(rule4, pod)
    links.add_rule(rule6, pod)
    shown = ip_json(pod, "rule", "show")
    assert {"priority": 1011, "src": "172.16.99.5", "table": "1011"} in [
        {k: r.get(k) for k in ("priority", "src", "table")} for r in shown
    ]
    shown6 = ip_json(pod, "-6", "rule", "show")
    assert any(r.get("src") == "fd00:99::5" and r["priority"] == 1011 for r in shown6)
    assert rule4 in links.rules(socket.AF_INET, pod)
    assert rule6 in links.rules(0, pod)
    assert rule6 not in links.rules(socket.AF_INET, pod)
    links.del_rule(rule4, pod)
    assert rule4 not in links.rules(0, pod)
    assert not any(r.get("src") == "172.16.99.5" for r in ip_json(pod, "rule", "show"))


def test_set_sysctl_writes_inside_the_netns_only(links, host, pod):
    a, _ = veth(pod)
    links.set_sysctl(f"net/ipv4/conf/{a}/arp_notify", "1", pod)
    inside = sh(
        "ip",
        "netns",
        "exec",
        os.path.basename(pod),
        "cat",
        f"/proc/sys/net/ipv4/conf/{a}/arp_notify",
    )
    assert inside.strip() == "1"
    # The same key is unknown in the test's own netns: the write went nowhere else.
    assert not os.path.exists(f"/proc/sys/net/ipv4/conf/{a}/arp_notify")


def test_set_sysctl_unknown_key_raises(links, pod):
    with pytest.raises(KernelError):
        links.set_sysctl("net/ipv4/conf/rknothere/arp_notify", "1", pod)


def test_sockets_are_cached_per_netns_and_closed(host, pod):
    adapter = NetlinkLinks()
    a, _ = veth(pod)
    adapter.get(a, pod)
    adapter.get(a, pod)
    adapter.get("lo")
    fds = set(os.listdir("/proc/self/fd"))
    adapter.set_up(a, pod)
    assert set(os.listdir("/proc/self/fd")) == fds  # no socket per call
    adapter.close()
    assert len(set(os.listdir("/proc/self/fd"))) < len(fds)
