# SPDX-License-Identifier: Apache-2.0
"""RawProbes on a real L2 segment.

Topology (all namespaces created here)::

    pod netns:    rkP (veth) ----+
    fabric netns: bridge rkB (gateway 172.16.99.254/24, fd00:99::fe/64)
    other netns:  rkO (veth) ----+   holds 172.16.99.5 / fd00:99::5 (the "other host")
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from cni.kernel import InvalidArgument, ProbeAnswer
from cni.kernel.netns import in_netns
from cni.kernel.probes import (
    ETH_P_ARP,
    ETH_P_IPV6,
    RawProbes,
    parse_arp,
    parse_na,
)
from tests.conftest import unique_name
from tests.kernel.conftest import Host, ip, ip_json

pytestmark = pytest.mark.kernel

GW4, GW6 = "172.16.99.254", "fd00:99::fe"
OTHER4, OTHER6 = "172.16.99.5", "fd00:99::5"
FREE4, FREE6 = "172.16.99.6", "fd00:99::6"
POD4, POD6 = "172.16.99.7", "fd00:99::7"
OTHER_MAC = "02:00:00:99:00:05"


@dataclass
class Segment:
    pod: str
    fabric: str
    other: str
    pod_if: str
    bridge: str
    bridge_mac: str


def _port(fabric: str, bridge: str, into: str, name: str) -> None:
    peer = unique_name("rk")
    ip(fabric, "link", "add", name, "type", "veth", "peer", "name", peer)
    ip(fabric, "link", "set", name, "netns", os.path.basename(into))
    ip(fabric, "link", "set", peer, "master", bridge, "up")


@pytest.fixture
def seg(host: Host) -> Iterator[Segment]:
    pod, fabric, other = host.make(), host.make(), host.make()
    bridge, pod_if, other_if = unique_name("rk"), unique_name("rk"), unique_name("rk")
    # No multicast snooping: NS to solicited-node groups are flooded like a switch
    # without an MLD querier would.
    ip(fabric, "link", "add", bridge, "type", "bridge", "mcast_snooping", "0")
    ip(fabric, "addr", "add", f"{GW4}/24", "dev", bridge)
    ip(fabric, "addr", "add", f"{GW6}/64", "dev", bridge, "nodad")
    ip(fabric, "link", "set", bridge, "up")
    _port(fabric, bridge, pod, pod_if)
    _port(fabric, bridge, other, other_if)
    ip(other, "link", "set", other_if, "address", OTHER_MAC, "up")
    ip(other, "addr", "add", f"{OTHER4}/24", "dev", other_if)
    ip(other, "addr", "add", f"{OTHER6}/64", "dev", other_if, "nodad")
    ip(pod, "link", "set", pod_if, "up")
    bridge_mac = ip_json(fabric, "link", "show", "dev", bridge)[0]["address"]
    yield Segment(pod, fabric, other, pod_if, bridge, bridge_mac)


def test_ipv4_conflict_reports_the_other_hosts_mac(seg: Segment):
    answer = RawProbes().conflict(seg.pod_if, OTHER4, seg.pod)
    assert answer == ProbeAnswer(ip=OTHER4, mac=OTHER_MAC)


def test_ipv4_free_address_is_no_conflict_within_the_bound(seg: Segment):
    start = time.monotonic()
    assert (
        RawProbes().conflict(seg.pod_if, FREE4, seg.pod, tries=2, interval=0.05) is None
    )
    assert time.monotonic() - start < 0.5


def test_ipv4_conflict_probe_does_not_teach_our_address(seg: Segment):
    # RFC 5227: sender IP 0.0.0.0, so the other host caches nothing about us.
    RawProbes().conflict(seg.pod_if, OTHER4, seg.pod)
    neigh = ip_json(seg.other, "neigh", "show")
    assert not [n for n in neigh if n.get("dst") == "0.0.0.0"]


def test_ipv4_gateway_answers(seg: Segment):
    ip(seg.pod, "addr", "add", f"{POD4}/24", "dev", seg.pod_if)
    answer = RawProbes().gateway(seg.pod_if, POD4, GW4, seg.pod)
    assert answer == ProbeAnswer(ip=GW4, mac=seg.bridge_mac)


def test_ipv4_silent_gateway_is_none_within_the_bound(seg: Segment):
    start = time.monotonic()
    got = RawProbes().gateway(seg.pod_if, POD4, "172.16.99.253", seg.pod, 3, 0.05)
    assert got is None
    assert time.monotonic() - start < 0.6


def test_ipv6_conflict_reports_the_other_hosts_mac(seg: Segment):
    answer = RawProbes().conflict(seg.pod_if, OTHER6, seg.pod)
    assert answer == ProbeAnswer(ip=OTHER6, mac=OTHER_MAC)


def test_ipv6_free_address_is_no_conflict(seg: Segment):
    start = time.monotonic()
    assert (
        RawProbes().conflict(seg.pod_if, FREE6, seg.pod, tries=2, interval=0.05) is None
    )
    assert time.monotonic() - start < 0.5


def test_ipv6_gateway_answers(seg: Segment):
    ip(seg.pod, "addr", "add", f"{POD6}/64", "dev", seg.pod_if, "nodad")
    answer = RawProbes().gateway(seg.pod_if, POD6, GW6, seg.pod)
    assert answer == ProbeAnswer(ip=GW6, mac=seg.bridge_mac)


def test_ipv6_silent_gateway_is_none(seg: Segment):
    got = RawProbes().gateway(seg.pod_if, POD6, "fd00:99::fd", seg.pod, 2, 0.05)
    assert got is None


def test_probe_on_a_down_link_is_refused(seg: Segment):
    ip(seg.pod, "link", "set", seg.pod_if, "down")
    with pytest.raises(InvalidArgument, match="down"):
        RawProbes().conflict(seg.pod_if, FREE4, seg.pod)


def _capture(netns: str, ifname: str, proto: int) -> socket.socket:
    with in_netns(netns):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    sock.bind((ifname, proto))
    return sock


def _drain(sock: socket.socket, timeout: float = 0.5) -> Iterator[bytes]:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([sock], [], [], left)[0]:
            return
        yield sock.recv(65535)


def test_announce_sends_gratuitous_arp_and_unsolicited_na(seg: Segment):
    pod_mac = ip_json(seg.pod, "link", "show", "dev", seg.pod_if)[0]["address"]
    arp_sock = _capture(seg.other, _other_if(seg), ETH_P_ARP)
    na_sock = _capture(seg.other, _other_if(seg), ETH_P_IPV6)
    try:
        RawProbes().announce(seg.pod_if, [POD4, POD6], seg.pod)
        garps = [a for a in map(parse_arp, _drain(arp_sock, 0.3)) if a]
        assert any(
            a.op == 1 and a.spa == a.tpa == POD4 and a.sha == pod_mac for a in garps
        )
        nas = [n for n in map(parse_na, _drain(na_sock, 0.3)) if n]
        assert any(
            n.target == POD6
            and n.mac == pod_mac
            and n.flags & 0x20000000
            and not n.flags & 0x40000000
            for n in nas
        )
    finally:
        arp_sock.close()
        na_sock.close()


def test_announce_updates_a_stale_neighbour_entry(seg: Segment):
    pod_mac = ip_json(seg.pod, "link", "show", "dev", seg.pod_if)[0]["address"]
    other_if = _other_if(seg)
    for addr in (POD4, POD6):
        ip(
            seg.other,
            "neigh",
            "replace",
            addr,
            "lladdr",
            "02:de:ad:00:00:01",
            "dev",
            other_if,
            "nud",
            "stale",
        )
    RawProbes().announce(seg.pod_if, [POD4, POD6], seg.pod)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        table = {n["dst"]: n.get("lladdr") for n in ip_json(seg.other, "neigh", "show")}
        if table.get(POD4) == pod_mac and table.get(POD6) == pod_mac:
            break
        time.sleep(0.02)
    assert (table.get(POD4), table.get(POD6)) == (pod_mac, pod_mac)


def test_announce_errors_are_logged_not_raised(seg: Segment, caplog):
    RawProbes().announce("rknothere", [POD4, "fd00:99::7"], seg.pod)
    assert "announce 172.16.99.7 on rknothere failed" in caplog.text


def _other_if(seg: Segment) -> str:
    names = [
        x["ifname"] for x in ip_json(seg.other, "link", "show") if x["ifname"] != "lo"
    ]
    assert len(names) == 1
    return names[0]


def test_the_kernel_answer_to_a_dad_probe_is_an_na_to_all_nodes(seg: Segment):
    # What the conflict probe relies on, seen with an independent capture.
    sock = _capture(seg.pod, seg.pod_if, ETH_P_IPV6)
    try:
        assert RawProbes().conflict(seg.pod_if, OTHER6, seg.pod) is not None
        frames = list(_drain(sock, 0.2))
        answers = [
            (f[0:6], n.mac)
            for f, n in ((f, parse_na(f)) for f in frames)
            if n and n.target == OTHER6
        ]
        assert (bytes.fromhex("333300000001"), OTHER_MAC) in answers
    finally:
        sock.close()
