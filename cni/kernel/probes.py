# SPDX-License-Identifier: Apache-2.0
"""``Probes`` adapter: ARP / NDP conflict and gateway probes, announcements.

May import: the standard library, ``cni.kernel`` and ``cni.kernel.netns`` (no
pyroute2: link facts come from ioctls on the probe's own socket, so probing adds
no import cost).

Frames are built here by hand (``struct``, RFC 1071 checksums) and sent on an
AF_PACKET raw socket created *inside* the pod netns (the socket stays bound to the
netns it was created in). Every wait is bounded: ``tries`` sends, each followed by
up to ``interval`` seconds of listening.

- IPv4 conflict: RFC 5227 probe (ARP request, sender IP 0.0.0.0, target the pod
  IP); any ARP from another MAC whose *sender* IP is the pod IP means "in use".
  "Another" is any MAC not of a link in the pod's netns: several NICs of one
  pod may share an L2 segment (VFs of one PF, a flat fabric), and one whose
  ``arp_ignore`` is 0 answers for its neighbour's address - the pod itself,
  not an owner elsewhere. Ignoring the pod's MACs, rather than probing before
  the address is configured, keeps the window overlapped with the routing
  work (the routes' source address needs the address on the NIC).
- IPv4 gateway: ARP request from the pod IP to the gateway; a reply from the gateway.
- IPv6 conflict: a DAD-style NS (source ::, to the target's solicited-node group);
  an NA for the target from another MAC means "in use" (Linux answers a DAD NS
  with an NA to all-nodes).
- IPv6 gateway: an NS from the pod IP with our link-layer address option to the
  gateway's solicited-node group; the gateway's NA answers.
- announce: a gratuitous ARP request per IPv4 address, an unsolicited NA with
  the Override flag to all-nodes per IPv6 address.

IPoIB links (ARPHRD_INFINIBAND, 20-byte addresses) are not probed: the calls log
that and return None (``probe_nic`` raises NotSupported instead, so a skipped
gateway check cannot read as a silent gateway).

``probe_nic`` checks a whole NIC at once: one socket (ETH_P_ALL when both
families are probed) is opened in the pod netns, then a single select() loop on
the calling thread drives every probe, each with its own send/listen schedule. The
IPv4 and IPv6 probes overlap, so a dual-stack NIC waits one conflict window
(~300 ms) instead of two; within a family the gateway probe is sent only after
the family's conflict probes ended silent, because a probe sent *from* an
address another host holds (the gateway probe's sender IP) would teach the
gateway our MAC for it. ``conflict``/``gateway`` run the same loop with one probe.

Sockets are few and closed off the main thread: releasing an AF_PACKET socket
waits for an RCU grace period (8-16 ms measured here), so an ADD uses one for
detection and one (send-only) for all its announcements, and neither waits for
the close.
"""

from __future__ import annotations

import fcntl
import ipaddress
import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from cni.kernel import (
    GatewayCheck,
    InvalidArgument,
    KernelError,
    NetnsPath,
    NicProbeReport,
    NotSupported,
    ProbeAnswer,
)
from cni.kernel.netns import in_netns

log = logging.getLogger(__name__)

ETH_P_ARP = 0x0806
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_ALL = 0x0003
SEND_ONLY = 0  # protocol 0: a bound packet socket that receives nothing
ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32
ARPOP_REQUEST = 1
ARPOP_REPLY = 2
IPPROTO_ICMPV6 = 58
ND_NEIGHBOR_SOLICIT = 135
ND_NEIGHBOR_ADVERT = 136
ND_OPT_SOURCE_LL = 1
ND_OPT_TARGET_LL = 2
NA_FLAG_SOLICITED = 0x40000000
NA_FLAG_OVERRIDE = 0x20000000
PACKET_OUTGOING = 4
SIOCGIFFLAGS = 0x8913
SIOCGIFHWADDR = 0x8927
IFF_UP = 0x1
BROADCAST = b"\xff" * 6
ZERO_MAC = b"\x00" * 6
MIN_FRAME = 60  # Ethernet minimum without FCS; veth does not pad for us


# --------------------------------------------------------------- frame building


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))


def mac_str(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def ethernet(dst: bytes, src: bytes, ethertype: int, payload: bytes) -> bytes:
    frame = dst + src + struct.pack("!H", ethertype) + payload
    return frame.ljust(MIN_FRAME, b"\x00")


def arp_packet(op: int, sha: bytes, spa: str, tha: bytes, tpa: str) -> bytes:
    """The 28-byte Ethernet/IPv4 ARP body (RFC 826)."""
    return struct.pack(
        "!HHBBH6s4s6s4s",
        ARPHRD_ETHER,
        ETH_P_IP,
        6,
        4,
        op,
        sha,
        socket.inet_aton(spa),
        tha,
        socket.inet_aton(tpa),
    )


def checksum(data: bytes) -> int:
    """RFC 1071 Internet checksum."""
    if len(data) % 2:
        data += b"\x00"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def icmpv6_checksum(src: bytes, dst: bytes, icmp: bytes) -> int:
    """ICMPv6 checksum over the IPv6 pseudo-header (RFC 8200 8.1)."""
    pseudo = src + dst + struct.pack("!I3xB", len(icmp), IPPROTO_ICMPV6)
    return checksum(pseudo + icmp)


def solicited_node(ip: str) -> str:
    """ff02::1:ffXX:XXXX for ``ip`` (RFC 4291 2.7.1)."""
    low = ipaddress.IPv6Address(ip).packed[-3:]
    return str(ipaddress.IPv6Address(bytes.fromhex("ff0200000000000000000001ff") + low))


def multicast_mac(ip6: str) -> bytes:
    """33:33 + the low 32 bits of an IPv6 multicast address (RFC 2464 7)."""
    return b"\x33\x33" + ipaddress.IPv6Address(ip6).packed[-4:]


def ipv6_icmp(src: str, dst: str, icmp_no_sum: bytes) -> bytes:
    """IPv6 header + ICMPv6 message whose checksum field (bytes 2-3) is filled."""
    s = ipaddress.IPv6Address(src).packed
    d = ipaddress.IPv6Address(dst).packed
    csum = icmpv6_checksum(s, d, icmp_no_sum)
    icmp = icmp_no_sum[:2] + struct.pack("!H", csum) + icmp_no_sum[4:]
    header = struct.pack("!IHBB", 6 << 28, len(icmp), IPPROTO_ICMPV6, 255)
    return header + s + d + icmp


def neighbor_solicit(src: str, target: str, mac: bytes | None) -> bytes:
    """NS for ``target`` sent to its solicited-node group; SLLA unless src is ::."""
    body = struct.pack("!BBHI", ND_NEIGHBOR_SOLICIT, 0, 0, 0)
    body += ipaddress.IPv6Address(target).packed
    if mac is not None:
        body += struct.pack("!BB", ND_OPT_SOURCE_LL, 1) + mac
    return ipv6_icmp(src, solicited_node(target), body)


def neighbor_advert(src: str, dst: str, target: str, mac: bytes, flags: int) -> bytes:
    """NA for ``target`` with a target link-layer address option."""
    body = struct.pack("!BBHI", ND_NEIGHBOR_ADVERT, 0, 0, flags)
    body += ipaddress.IPv6Address(target).packed
    body += struct.pack("!BB", ND_OPT_TARGET_LL, 1) + mac
    return ipv6_icmp(src, dst, body)


# ---------------------------------------------------------------- frame parsing


@dataclass(frozen=True, slots=True)
class Arp:
    op: int
    sha: str
    spa: str
    tha: str
    tpa: str


def parse_arp(frame: bytes) -> Arp | None:
    """The ARP body of an Ethernet frame, None if it is not Ethernet/IPv4 ARP."""
    if len(frame) < 42 or struct.unpack("!H", frame[12:14])[0] != ETH_P_ARP:
        return None
    htype, ptype, hlen, plen, op, sha, spa, tha, tpa = struct.unpack(
        "!HHBBH6s4s6s4s", frame[14:42]
    )
    if (htype, ptype, hlen, plen) != (ARPHRD_ETHER, ETH_P_IP, 6, 4):
        return None
    return Arp(
        op, mac_str(sha), socket.inet_ntoa(spa), mac_str(tha), socket.inet_ntoa(tpa)
    )


@dataclass(frozen=True, slots=True)
class Advert:
    src: str  # IPv6 source of the NA
    target: str
    flags: int
    mac: str  # target link-layer option, else the Ethernet source


def parse_na(frame: bytes) -> Advert | None:
    """An NA carried directly in IPv6 (no extension headers), else None."""
    if len(frame) < 14 + 40 + 24 or struct.unpack("!H", frame[12:14])[0] != ETH_P_IPV6:
        return None
    ip6 = frame[14:54]
    if ip6[6] != IPPROTO_ICMPV6:
        return None
    plen = struct.unpack("!H", ip6[4:6])[0]
    icmp = frame[54 : 54 + plen]
    if len(icmp) < 24 or icmp[0] != ND_NEIGHBOR_ADVERT or icmp[1] != 0:
        return None
    flags = struct.unpack("!I", icmp[4:8])[0]
    target = str(ipaddress.IPv6Address(icmp[8:24]))
    mac = mac_str(frame[6:12])
    opts = icmp[24:]
    while len(opts) >= 8:
        otype, olen = opts[0], opts[1]
        if olen == 0:
            break
        if otype == ND_OPT_TARGET_LL and olen * 8 >= 8:
            mac = mac_str(opts[2:8])
        opts = opts[olen * 8 :]
    return Advert(str(ipaddress.IPv6Address(ip6[8:24])), target, flags, mac)


# ------------------------------------------------------------------ the adapter


@dataclass(frozen=True, slots=True)
class _Link:
    sock: socket.socket
    mac: bytes
    hwtype: int
    #: The links of the netns the socket lives in: an answer from one of
    #: them is the pod's own kernel, never another host holding the address.
    pod: _PodMacs | None = None


class _PodMacs:
    """The MACs of every link in the pod's netns, read on first need.

    With ``arp_ignore=0`` a NIC answers for the address of another NIC of the
    pod on the same segment (VFs of one PF, a flat fabric): such an answer is
    the pod itself. They are read only when an answer from a MAC other than
    the probing NIC's arrives - rare, so the common silent probe pays nothing
    - by visiting the netns (``if_nameindex`` lists the calling thread's) and
    asking the probe's socket, which lives there, for each link's address.
    """

    def __init__(self, netns: NetnsPath, sock: socket.socket) -> None:
        self._netns = netns
        self._sock = sock
        self._macs: frozenset[str] | None = None

    def __contains__(self, mac: object) -> bool:
        if self._macs is None:
            found = set()
            with in_netns(self._netns):
                names = [name for _index, name in socket.if_nameindex()]
            for name in names:
                ifreq = struct.pack("16s16x", name.encode())
                try:
                    hw = fcntl.ioctl(self._sock, SIOCGIFHWADDR, ifreq)
                except OSError:
                    continue  # gone meanwhile
                found.add(mac_str(hw[18:24]))
            found.discard(mac_str(ZERO_MAC))
            self._macs = frozenset(found)
        return mac in self._macs


def _open_link(ifname: str, proto: int) -> _Link:
    """A raw socket bound to ``ifname`` in the calling thread's netns."""
    # Protocol 0 until bind: no frames from other interfaces sneak in before.
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        ifreq = struct.pack("16s16x", ifname.encode())
        try:
            raw_flags = fcntl.ioctl(sock, SIOCGIFFLAGS, ifreq)
            hw = fcntl.ioctl(sock, SIOCGIFHWADDR, ifreq)
            sock.bind((ifname, proto))
        except OSError as exc:
            raise KernelError(f"probe on {ifname}: {exc.strerror}", exc.errno) from exc
        if not struct.unpack("16xH", raw_flags[:18])[0] & IFF_UP:
            raise InvalidArgument(f"probe on {ifname}: link is down, bring it up first")
    except BaseException:
        sock.close()
        raise
    return _Link(sock, hw[18:24], struct.unpack("H", hw[16:18])[0])


def _close_in_background(sock: socket.socket) -> None:
    """Close ``sock`` on a helper thread.

    Releasing an AF_PACKET socket waits for an RCU grace period in the kernel
    (``synchronize_net()`` in packet_release: 8-16 ms here, whatever the
    socket did); the plugin has no reason to wait for it. The thread spends
    that time in the close(2) syscall, without the GIL; at exit the process
    waits for it like for any other close.
    """
    threading.Thread(target=sock.close, name="probe-close", daemon=True).start()


@contextmanager
def _packet_sockets(
    ifname: str, protos: Sequence[int], netns: NetnsPath
) -> Iterator[dict[int, _Link]]:
    """A raw socket on ``ifname`` in ``netns`` for the ethertypes in ``protos``.

    One socket serves them all (ETH_P_ALL when there are several; the frame
    parsers check the ethertype), since every socket costs a grace period when
    it is released. It is created during one visit of the netns (a socket
    stays bound to the netns it was created in), then used from the host side.
    """
    proto = protos[0] if len(set(protos)) == 1 else ETH_P_ALL
    with in_netns(netns):
        link = _open_link(ifname, proto)
    link = replace(link, pod=_PodMacs(netns, link.sock))
    try:
        yield {p: link for p in protos}
    finally:
        _close_in_background(link.sock)


@contextmanager
def _packet_socket(ifname: str, proto: int, netns: NetnsPath) -> Iterator[_Link]:
    """A raw socket on ``ifname`` in ``netns``, with the link's MAC and type."""
    with _packet_sockets(ifname, (proto,), netns) as links:
        yield links[proto]


def _drain(sock: socket.socket) -> Iterator[bytes]:
    """The frames queued on ``sock`` now; our own sends are skipped."""
    while True:
        try:
            frame, addr = sock.recvfrom(65535, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        if addr[2] != PACKET_OUTGOING:
            yield frame


def _ipoib_skip(link: _Link, ifname: str, what: str) -> bool:
    if link.hwtype == ARPHRD_INFINIBAND:
        log.info(
            "%s on %s skipped: IPoIB link (20-byte hardware address), "
            "ARP/NDP probing is not done on InfiniBand",
            what,
            ifname,
        )
        return True
    return False


@dataclass(slots=True, eq=False)
class _Probe:
    """One conflict or gateway probe: its frame, what answers it, its progress."""

    proto: int  # ETH_P_ARP or ETH_P_IPV6: which socket it uses
    gateway: bool
    wanted: str  # the IP whose owner must answer
    frame: bytes
    own: str  # our MAC: answers from it are our own kernel's
    pod: _PodMacs | None = None  # the pod's other links: its own kernel too
    sent: int = 0
    window_end: float = 0.0
    done: bool = False
    answer: ProbeAnswer | None = None

    def _ours(self, mac: str) -> bool:
        if mac == self.own:
            return True
        # Only a conflict answer may come from the pod's other NICs; a gateway
        # answers from outside, and reading the pod's MACs then would cost
        # every gateway check a visit of the netns.
        return not self.gateway and self.pod is not None and mac in self.pod

    def matches(self, raw: bytes) -> ProbeAnswer | None:
        if self.proto == ETH_P_ARP:
            arp = parse_arp(raw)
            if arp is None or arp.spa != self.wanted or self._ours(arp.sha):
                return None
            # A gateway must reply; for a conflict, RFC 5227 2.1.1 counts any ARP
            # (request or reply) sent from the probed address.
            if self.gateway and arp.op != ARPOP_REPLY:
                return None
            return ProbeAnswer(ip=self.wanted, mac=arp.sha)
        na = parse_na(raw)
        if na is None or na.target != self.wanted or self._ours(na.mac):
            return None
        return ProbeAnswer(ip=self.wanted, mac=na.mac)


def _proto_of(ip: str) -> int:
    return ETH_P_ARP if ipaddress.ip_address(ip).version == 4 else ETH_P_IPV6


def _conflict_probe(link: _Link, ip: str) -> _Probe:
    own = mac_str(link.mac)
    if _proto_of(ip) == ETH_P_ARP:
        # RFC 5227 probe: sender IP 0.0.0.0 so nobody's cache learns us.
        body = arp_packet(ARPOP_REQUEST, link.mac, "0.0.0.0", ZERO_MAC, ip)
        frame = ethernet(BROADCAST, link.mac, ETH_P_ARP, body)
        return _Probe(ETH_P_ARP, False, ip, frame, own, link.pod)
    wanted = str(ipaddress.IPv6Address(ip))
    packet = neighbor_solicit("::", wanted, None)  # DAD: no SLLA
    dst_mac = multicast_mac(solicited_node(wanted))
    frame = ethernet(dst_mac, link.mac, ETH_P_IPV6, packet)
    return _Probe(ETH_P_IPV6, False, wanted, frame, own, link.pod)


def _gateway_probe(link: _Link, ip: str, gateway: str) -> _Probe:
    own = mac_str(link.mac)
    if _proto_of(gateway) == ETH_P_ARP:
        body = arp_packet(ARPOP_REQUEST, link.mac, ip, ZERO_MAC, gateway)
        frame = ethernet(BROADCAST, link.mac, ETH_P_ARP, body)
        return _Probe(ETH_P_ARP, True, gateway, frame, own, link.pod)
    wanted = str(ipaddress.IPv6Address(gateway))
    packet = neighbor_solicit(ip, wanted, link.mac)
    dst_mac = multicast_mac(solicited_node(wanted))
    frame = ethernet(dst_mac, link.mac, ETH_P_IPV6, packet)
    return _Probe(ETH_P_IPV6, True, wanted, frame, own, link.pod)


def _run(
    links: Mapping[int, _Link],
    probes: Sequence[_Probe],
    tries: int,
    interval: float,
) -> None:
    """Drive ``probes`` on one thread until each has an answer or ran out of tries.

    Each probe sends, listens ``interval``, ``tries`` times, as a lone probe
    would; the probes of different families overlap. A gateway probe starts only
    when every conflict probe of its family ended silent (a probe sent from an
    address in use would poison the gateway's cache); once a conflict is found
    nothing more is sent and the function returns.
    """
    while True:
        now = time.monotonic()
        waiting: list[_Probe] = []
        for probe in sorted(probes, key=lambda p: p.gateway):
            if probe.done:
                continue
            if (
                probe.gateway
                and probe.sent == 0
                and any(
                    not p.done
                    for p in probes
                    if not p.gateway and p.proto == probe.proto
                )
            ):
                continue  # its family's conflict verdict is not in yet
            if probe.window_end <= now:
                if probe.sent == tries:
                    probe.done = True
                    continue
                links[probe.proto].sock.send(probe.frame)
                probe.sent += 1
                probe.window_end = now + interval
            waiting.append(probe)
        if not waiting:
            # Each pass visits conflict probes before gateway probes, so a gateway
            # probe whose family's verdict just came in was started in this pass.
            return
        socks = {links[p.proto].sock for p in waiting}
        timeout = max(0.0, min(p.window_end for p in waiting) - time.monotonic())
        ready, _, _ = select.select(list(socks), [], [], timeout)
        for sock in ready:
            for raw in _drain(sock):
                for probe in waiting:
                    if probe.done or links[probe.proto].sock is not sock:
                        continue
                    answer = probe.matches(raw)
                    if answer is None:
                        continue
                    probe.answer, probe.done = answer, True
                    if not probe.gateway:
                        return


def _probe_one(
    ifname: str,
    target: str,
    netns: NetnsPath,
    kind: str,
    make: Callable[[_Link], _Probe],
    tries: int,
    interval: float,
) -> ProbeAnswer | None:
    """One probe towards ``target`` on a socket of its family; its answer."""
    proto = "ARP" if ipaddress.ip_address(target).version == 4 else "NDP"
    with _packet_socket(ifname, _proto_of(target), netns) as link:
        if _ipoib_skip(link, ifname, f"{proto} {kind} probe"):
            return None
        probe = make(link)
        _run({probe.proto: link}, [probe], tries, interval)
        return probe.answer


class RawProbes:
    """``NicProbes`` over AF_PACKET raw sockets; see the module doc for the frames."""

    def conflict(
        self,
        ifname: str,
        ip: str,
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> ProbeAnswer | None:
        return _probe_one(
            ifname,
            ip,
            netns,
            "conflict",
            lambda link: _conflict_probe(link, ip),
            tries,
            interval,
        )

    def gateway(
        self,
        ifname: str,
        ip: str,
        gateway: str,
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> ProbeAnswer | None:
        return _probe_one(
            ifname,
            gateway,
            netns,
            "gateway",
            lambda link: _gateway_probe(link, ip, gateway),
            tries,
            interval,
        )

    def probe_nic(
        self,
        ifname: str,
        ips: Sequence[str],
        gateways: Sequence[GatewayCheck],
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> NicProbeReport:
        protos = sorted(
            {_proto_of(ip) for ip in ips} | {_proto_of(c.gateway) for c in gateways}
        )
        if not protos:
            return NicProbeReport()
        with _packet_sockets(ifname, protos, netns) as links:
            first = links[protos[0]]
            if first.hwtype == ARPHRD_INFINIBAND:
                raise NotSupported(
                    f"probe on {ifname}: IPoIB link, no ARP/NDP probing on InfiniBand"
                )
            conflicts = [_conflict_probe(links[_proto_of(ip)], ip) for ip in ips]
            checks = [
                (c, _gateway_probe(links[_proto_of(c.gateway)], c.ip, c.gateway))
                for c in gateways
            ]
            _run(links, [*conflicts, *(p for _, p in checks)], tries, interval)
        conflict = next((p.answer for p in conflicts if p.answer is not None), None)
        if conflict is not None:
            log.debug("conflict probe on %s answered by %s", ifname, conflict.mac)
        return NicProbeReport(
            conflict=conflict,
            gateways=tuple((c, p.answer) for c, p in checks if p.done),
        )

    def announce(self, ifname: str, ips: Sequence[str], netns: NetnsPath) -> None:
        if not ips:
            return
        try:
            # Send-only, and one socket for every address of both families.
            with _packet_socket(ifname, SEND_ONLY, netns) as link:
                if _ipoib_skip(link, ifname, "gratuitous ARP / unsolicited NA"):
                    return
                for ip in ips:
                    try:
                        link.sock.send(_announcement(link, ip))
                    except (OSError, ValueError) as exc:
                        log.warning("announce %s on %s failed: %s", ip, ifname, exc)
        except (KernelError, OSError) as exc:
            for ip in ips:
                log.warning("announce %s on %s failed: %s", ip, ifname, exc)


def _announcement(link: _Link, ip: str) -> bytes:
    """A gratuitous ARP (IPv4) or an unsolicited NA with Override (IPv6)."""
    if ipaddress.ip_address(ip).version == 4:
        # A request with sender == target IP, as Linux's arp_notify sends.
        body = arp_packet(ARPOP_REQUEST, link.mac, ip, ZERO_MAC, ip)
        return ethernet(BROADCAST, link.mac, ETH_P_ARP, body)
    packet = neighbor_advert(ip, "ff02::1", ip, link.mac, NA_FLAG_OVERRIDE)
    return ethernet(multicast_mac("ff02::1"), link.mac, ETH_P_IPV6, packet)
