# SPDX-License-Identifier: Apache-2.0
"""RawProbes.probe_nic: both families at once, conflict before gateway in each.

Topology (all namespaces created here, names prefixed "rq")::

    pod netns:    rqP (veth) 172.16.98.7/24, fd00:98::7/64 --+
    fabric netns: bridge (gateway 172.16.98.254/24, fd00:98::fe/64)
    other netns:  rqO (veth) 172.16.98.5, fd00:98::5 --------+  (the "other host")

The other host also keeps a packet socket listening to everything the pod
sends, so the order of the probes on the wire is read back independently of
the adapter.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from cni.attach.detection import DetectionPolicy, detect
from cni.errors import GATEWAY_UNREACHABLE, IP_CONFLICT, CniError
from cni.ipam import IpamAddress
from cni.kernel import GatewayCheck, ProbeAnswer
from cni.kernel.netns import in_netns
from cni.kernel.probes import ETH_P_ARP, ETH_P_IPV6, RawProbes, parse_arp
from tests.conftest import unique_name
from tests.kernel.conftest import ip, ip_json

pytestmark = pytest.mark.kernel

GW4, GW6 = "172.16.98.254", "fd00:98::fe"
OTHER4, OTHER6 = "172.16.98.5", "fd00:98::5"
POD4, POD6 = "172.16.98.7", "fd00:98::7"
SILENT4, SILENT6 = "172.16.98.253", "fd00:98::fd"
OTHER_MAC = "02:00:00:98:00:05"
POD_MAC = "02:00:00:98:00:07"
ETH_P_ALL = 0x0003
ND_NEIGHBOR_SOLICIT = 135


@dataclass
class Segment:
    pod: str
    fabric: str
    other: str
    pod_if: str
    other_if: str
    bridge: str
    bridge_mac: str


@pytest.fixture
def seg(make_netns: Callable[..., str]) -> Iterator[Segment]:
    pod, fabric, other = make_netns("rq"), make_netns("rq"), make_netns("rq")
    bridge, pod_if, other_if = unique_name("rq"), unique_name("rq"), unique_name("rq")
    # No multicast snooping: NS to solicited-node groups are flooded.
    ip(fabric, "link", "add", bridge, "type", "bridge", "mcast_snooping", "0")
    ip(fabric, "addr", "add", f"{GW4}/24", "dev", bridge)
    ip(fabric, "addr", "add", f"{GW6}/64", "dev", bridge, "nodad")
    ip(fabric, "link", "set", bridge, "up")
    for name, into in ((pod_if, pod), (other_if, other)):
        peer = unique_name("rq")
        ip(fabric, "link", "add", name, "type", "veth", "peer", "name", peer)
        ip(fabric, "link", "set", name, "netns", os.path.basename(into))
        ip(fabric, "link", "set", peer, "master", bridge, "up")
    ip(other, "link", "set", other_if, "address", OTHER_MAC, "up")
    ip(pod, "link", "set", pod_if, "address", POD_MAC, "up")
    # As the lifecycle does: the addresses are on the NIC (no kernel DAD) before
    # detection runs.
    ip(pod, "addr", "add", f"{POD4}/24", "dev", pod_if)
    ip(pod, "addr", "add", f"{POD6}/64", "dev", pod_if, "nodad")
    bridge_mac = ip_json(fabric, "link", "show", "dev", bridge)[0]["address"]
    # Every netns made here is deleted by make_netns, and the links with it.
    yield Segment(pod, fabric, other, pod_if, other_if, bridge, bridge_mac)


def _hold(seg: Segment, *cidrs: str) -> None:
    """Make the other host own ``cidrs`` (the conflicting addresses)."""
    for cidr in cidrs:
        extra = ("nodad",) if ":" in cidr else ()
        ip(seg.other, "addr", "add", cidr, "dev", seg.other_if, *extra)


@dataclass(frozen=True)
class Sent:
    """One probe the pod put on the wire, as the other host saw it."""

    kind: str  # "arp-conflict", "arp-gateway", "ns-dad", "ns-gateway"
    target: str


class Wire:
    """Everything the pod's MAC sends, captured in the other host's netns."""

    def __init__(self, seg: Segment) -> None:
        with in_netns(seg.other):
            self.sock = socket.socket(
                socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)
            )
        self.sock.bind((seg.other_if, 0))

    def close(self) -> None:
        self.sock.close()

    def probes(self) -> list[Sent]:
        """The pod's ARP requests and NS about this test's addresses, in order.

        The pod kernel's own DAD for its link-local address is left out.
        """
        out: list[Sent] = []
        while True:
            try:
                frame = self.sock.recv(65535, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return out
            if frame[6:12] != bytes.fromhex(POD_MAC.replace(":", "")):
                continue
            ethertype = struct.unpack("!H", frame[12:14])[0]
            if ethertype == ETH_P_ARP:
                arp = parse_arp(frame)
                if arp is not None and arp.op == 1:
                    kind = "arp-conflict" if arp.spa == "0.0.0.0" else "arp-gateway"
                    out.append(Sent(kind, arp.tpa))
            elif ethertype == ETH_P_IPV6 and frame[20] == 58 and len(frame) >= 78:
                if frame[54] != ND_NEIGHBOR_SOLICIT:
                    continue
                src = socket.inet_ntop(socket.AF_INET6, frame[22:38])
                target = socket.inet_ntop(socket.AF_INET6, frame[62:78])
                if target in (POD6, GW6, SILENT6):
                    kind = "ns-dad" if src == "::" else "ns-gateway"
                    out.append(Sent(kind, target))


@pytest.fixture
def wire(seg: Segment) -> Iterator[Wire]:
    w = Wire(seg)
    try:
        yield w
    finally:
        w.close()


def test_dual_stack_nic_waits_one_conflict_window_not_two(seg: Segment, wire: Wire):
    start = time.monotonic()
    report = RawProbes().probe_nic(
        seg.pod_if,
        [POD4, POD6],
        [GatewayCheck(POD4, GW4), GatewayCheck(POD6, GW6)],
        seg.pod,
        tries=3,
        interval=0.2,
    )
    elapsed = time.monotonic() - start
    assert report.conflict is None
    assert report.gateways == (
        (GatewayCheck(POD4, GW4), ProbeAnswer(GW4, seg.bridge_mac)),
        (GatewayCheck(POD6, GW6), ProbeAnswer(GW6, seg.bridge_mac)),
    )
    # One family after the other would take at least 2 x 3 x 200 ms.
    assert 0.6 <= elapsed < 1.0
    sent = wire.probes()
    # The IPv6 DAD probes went out while the IPv4 conflict probes were running.
    arp_conflicts = [i for i, s in enumerate(sent) if s.kind == "arp-conflict"]
    dad = [i for i, s in enumerate(sent) if s.kind == "ns-dad"]
    assert len(arp_conflicts) == 3 and len(dad) == 3
    assert dad[0] < arp_conflicts[-1] and arp_conflicts[0] < dad[-1]


def test_gateway_probe_is_sent_only_after_the_conflict_window(seg: Segment, wire: Wire):
    report = RawProbes().probe_nic(
        seg.pod_if,
        [POD4, POD6],
        [GatewayCheck(POD4, GW4), GatewayCheck(POD6, GW6)],
        seg.pod,
        tries=3,
        interval=0.05,
    )
    assert report.conflict is None
    sent = wire.probes()
    for conflict_kind, gateway_kind in (
        ("arp-conflict", "arp-gateway"),
        ("ns-dad", "ns-gateway"),
    ):
        kinds = [s.kind for s in sent if s.kind in (conflict_kind, gateway_kind)]
        # All three conflict probes of the family, then its gateway probe.
        assert kinds[:3] == [conflict_kind] * 3
        assert kinds[3] == gateway_kind


def test_conflict_stops_probing_and_the_gateway_never_hears_from_that_ip(
    seg: Segment, wire: Wire
):
    _hold(seg, f"{POD4}/24")
    report = RawProbes().probe_nic(
        seg.pod_if,
        [POD4, POD6],
        [GatewayCheck(POD4, GW4), GatewayCheck(POD6, GW6)],
        seg.pod,
    )
    assert report.conflict == ProbeAnswer(POD4, OTHER_MAC)
    assert GatewayCheck(POD4, GW4) not in dict(report.gateways)
    assert [s for s in wire.probes() if s.kind == "arp-gateway"] == []
    # Read back on the gateway: it learned nothing that points POD4 at us.
    neigh = ip_json(seg.fabric, "neigh", "show", "dev", seg.bridge)
    assert [n for n in neigh if n.get("lladdr") == POD_MAC] == []


def test_ipv6_conflict_is_found_alongside_a_clean_ipv4(seg: Segment):
    _hold(seg, f"{POD6}/64")
    report = RawProbes().probe_nic(
        seg.pod_if, [POD4, POD6], [GatewayCheck(POD4, GW4)], seg.pod
    )
    assert report.conflict == ProbeAnswer(POD6, OTHER_MAC)


def test_silent_gateway_is_judged_after_conflict_then_gateway_windows(seg: Segment):
    start = time.monotonic()
    report = RawProbes().probe_nic(
        seg.pod_if,
        [POD4, POD6],
        [GatewayCheck(POD4, SILENT4), GatewayCheck(POD6, GW6)],
        seg.pod,
        tries=3,
        interval=0.05,
    )
    elapsed = time.monotonic() - start
    assert report.conflict is None
    assert dict(report.gateways) == {
        GatewayCheck(POD4, SILENT4): None,
        GatewayCheck(POD6, GW6): ProbeAnswer(GW6, seg.bridge_mac),
    }
    # The IPv4 conflict window (3 x 50 ms) and then the gateway's (3 x 50 ms).
    assert elapsed >= 0.3


def test_gateway_only_probing_starts_at_once(seg: Segment, wire: Wire):
    # detectIPConflict off: nothing to wait for before the gateway probe.
    report = RawProbes().probe_nic(seg.pod_if, [], [GatewayCheck(POD4, GW4)], seg.pod)
    assert report.gateways == (
        (GatewayCheck(POD4, GW4), ProbeAnswer(GW4, seg.bridge_mac)),
    )
    assert [s.kind for s in wire.probes()] == ["arp-gateway"]


IPS = [
    IpamAddress(f"{POD4}/24", GW4, "p4", 4),
    IpamAddress(f"{POD6}/64", SILENT6, "p6", 6),
]


def test_detect_names_the_silent_ipv6_gateway_of_a_dual_stack_nic(seg: Segment):
    with pytest.raises(CniError) as info:
        detect(RawProbes(), seg.pod_if, seg.pod, IPS, DetectionPolicy(window=0.15))
    assert (info.value.code, info.value.msg) == (
        GATEWAY_UNREACHABLE,
        f"gateway {SILENT6} is unreachable",
    )


def test_detect_reports_the_conflicting_ip_and_mac(seg: Segment):
    _hold(seg, f"{POD4}/24")
    with pytest.raises(CniError) as info:
        detect(RawProbes(), seg.pod_if, seg.pod, IPS, DetectionPolicy())
    assert (info.value.code, info.value.msg) == (
        IP_CONFLICT,
        f"ip conflict: {POD4} is already used by {OTHER_MAC}",
    )


def _packet_sockets_in(netns: str) -> int:
    """AF_PACKET sockets created in ``netns``, as /proc/net/packet shows them there."""
    out = subprocess.run(
        ["ip", "netns", "exec", os.path.basename(netns), "cat", "/proc/net/packet"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return len(out.splitlines()) - 1  # the header


def test_probe_and_announce_sockets_are_closed_after_the_calls(seg: Segment):
    probes = RawProbes()
    probes.probe_nic(
        seg.pod_if, [POD4, POD6], [GatewayCheck(POD4, GW4)], seg.pod, 1, 0.02
    )
    probes.announce(seg.pod_if, [POD4, POD6], seg.pod)
    # They are closed on a helper thread (the kernel's release waits for an RCU
    # grace period), so poll briefly instead of expecting them gone at once.
    deadline = time.monotonic() + 2.0
    while _packet_sockets_in(seg.pod) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _packet_sockets_in(seg.pod) == 0


def test_default_detection_costs_one_90ms_window_and_ends_at_the_gateway_reply(
    seg: Segment,
):
    # A clean IPv4 NIC with a live gateway: the conflict window (90 ms, three
    # probes) is waited in full, the gateway check ends at its first answer.
    t0 = time.monotonic()
    detect(
        RawProbes(),
        seg.pod_if,
        seg.pod,
        [IpamAddress(f"{POD4}/24", GW4, "p4", 4)],
        DetectionPolicy(),
    )
    elapsed = time.monotonic() - t0
    assert 0.08 <= elapsed < 0.2, f"detection took {elapsed * 1000:.0f} ms"
