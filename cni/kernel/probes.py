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
- IPv4 gateway: ARP request from the pod IP to the gateway; a reply from the gateway.
- IPv6 conflict: a DAD-style NS (source ::, to the target's solicited-node group);
  an NA for the target from another MAC means "in use" (Linux answers a DAD NS
  with an NA to all-nodes).
- IPv6 gateway: an NS from the pod IP with our link-layer address option to the
  gateway's solicited-node group; the gateway's NA answers.
- announce: a gratuitous ARP request per IPv4 address, an unsolicited NA with
  the Override flag to all-nodes per IPv6 address.

IPoIB links (ARPHRD_INFINIBAND, 20-byte addresses) are not probed: the calls log
that and return None.
"""

from __future__ import annotations

import fcntl
import ipaddress
import logging
import select
import socket
import struct
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from cni.kernel import InvalidArgument, KernelError, NetnsPath, ProbeAnswer
from cni.kernel.netns import in_netns

log = logging.getLogger(__name__)

ETH_P_ARP = 0x0806
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
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
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
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


@contextmanager
def _packet_socket(ifname: str, proto: int, netns: NetnsPath) -> Iterator[_Link]:
    """A raw socket on ``ifname`` in ``netns``, with the link's MAC and type."""
    with in_netns(netns):
        # Protocol 0 until bind: no frames from other interfaces sneak in before.
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        ifreq = struct.pack("16s16x", ifname.encode())
        try:
            flags = struct.unpack("16xH", fcntl.ioctl(sock, SIOCGIFFLAGS, ifreq)[:18])[
                0
            ]
            hw = fcntl.ioctl(sock, SIOCGIFHWADDR, ifreq)
            sock.bind((ifname, proto))
        except OSError as exc:
            raise KernelError(f"probe on {ifname}: {exc.strerror}", exc.errno) from exc
        if not flags & IFF_UP:
            raise InvalidArgument(f"probe on {ifname}: link is down, bring it up first")
        hwtype = struct.unpack("H", hw[16:18])[0]
        yield _Link(sock, hw[18:24], hwtype)
    finally:
        sock.close()


def _frames(sock: socket.socket, deadline: float) -> Iterator[bytes]:
    """Incoming frames until ``deadline`` (monotonic); our own sends are skipped."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        ready, _, _ = select.select([sock], [], [], left)
        if not ready:
            return
        frame, addr = sock.recvfrom(65535)
        if addr[2] == PACKET_OUTGOING:
            continue
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


class RawProbes:
    """``Probes`` over AF_PACKET raw sockets; see the module doc for the frames."""

    def conflict(
        self,
        ifname: str,
        ip: str,
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> ProbeAnswer | None:
        if ipaddress.ip_address(ip).version == 4:
            return self._arp(ifname, ip, None, netns, tries, interval)
        return self._ndp(ifname, ip, None, netns, tries, interval)

    def gateway(
        self,
        ifname: str,
        ip: str,
        gateway: str,
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> ProbeAnswer | None:
        if ipaddress.ip_address(gateway).version == 4:
            return self._arp(ifname, ip, gateway, netns, tries, interval)
        return self._ndp(ifname, ip, gateway, netns, tries, interval)

    def _arp(
        self,
        ifname: str,
        ip: str,
        gateway: str | None,
        netns: NetnsPath,
        tries: int,
        interval: float,
    ) -> ProbeAnswer | None:
        what = "ARP conflict probe" if gateway is None else "ARP gateway probe"
        with _packet_socket(ifname, ETH_P_ARP, netns) as link:
            if _ipoib_skip(link, ifname, what):
                return None
            own = mac_str(link.mac)
            if gateway is None:
                # RFC 5227 probe: sender IP 0.0.0.0 so nobody's cache learns us.
                body = arp_packet(ARPOP_REQUEST, link.mac, "0.0.0.0", ZERO_MAC, ip)
                wanted = ip
            else:
                body = arp_packet(ARPOP_REQUEST, link.mac, ip, ZERO_MAC, gateway)
                wanted = gateway
            frame = ethernet(BROADCAST, link.mac, ETH_P_ARP, body)
            for _ in range(tries):
                link.sock.send(frame)
                deadline = time.monotonic() + interval
                for raw in _frames(link.sock, deadline):
                    arp = parse_arp(raw)
                    if arp is None or arp.spa != wanted or arp.sha == own:
                        continue
                    # A gateway must reply; for a conflict, RFC 5227 2.1.1 counts
                    # any ARP (request or reply) sent from the probed address.
                    if gateway is not None and arp.op != ARPOP_REPLY:
                        continue
                    return ProbeAnswer(ip=wanted, mac=arp.sha)
        return None

    def _ndp(
        self,
        ifname: str,
        ip: str,
        gateway: str | None,
        netns: NetnsPath,
        tries: int,
        interval: float,
    ) -> ProbeAnswer | None:
        what = "NDP conflict probe" if gateway is None else "NDP gateway probe"
        with _packet_socket(ifname, ETH_P_IPV6, netns) as link:
            if _ipoib_skip(link, ifname, what):
                return None
            own = mac_str(link.mac)
            wanted = str(ipaddress.IPv6Address(gateway or ip))
            if gateway is None:
                packet = neighbor_solicit("::", wanted, None)  # DAD: no SLLA
            else:
                packet = neighbor_solicit(ip, wanted, link.mac)
            dst_mac = multicast_mac(solicited_node(wanted))
            frame = ethernet(dst_mac, link.mac, ETH_P_IPV6, packet)
            for _ in range(tries):
                link.sock.send(frame)
                deadline = time.monotonic() + interval
                for raw in _frames(link.sock, deadline):
                    na = parse_na(raw)
                    if na is None or na.target != wanted or na.mac == own:
                        continue
                    return ProbeAnswer(ip=wanted, mac=na.mac)
        return None

    def announce(self, ifname: str, ips: Sequence[str], netns: NetnsPath) -> None:
        for ip in ips:
            try:
                if ipaddress.ip_address(ip).version == 4:
                    self._garp(ifname, ip, netns)
                else:
                    self._unsolicited_na(ifname, ip, netns)
            except (KernelError, OSError, ValueError) as exc:
                log.warning("announce %s on %s failed: %s", ip, ifname, exc)

    def _garp(self, ifname: str, ip: str, netns: NetnsPath) -> None:
        with _packet_socket(ifname, ETH_P_ARP, netns) as link:
            if _ipoib_skip(link, ifname, "gratuitous ARP"):
                return
            # A request with sender == target IP, as Linux's arp_notify sends.
            body = arp_packet(ARPOP_REQUEST, link.mac, ip, ZERO_MAC, ip)
            link.sock.send(ethernet(BROADCAST, link.mac, ETH_P_ARP, body))

    def _unsolicited_na(self, ifname: str, ip: str, netns: NetnsPath) -> None:
        with _packet_socket(ifname, ETH_P_IPV6, netns) as link:
            if _ipoib_skip(link, ifname, "unsolicited NA"):
                return
            packet = neighbor_advert(ip, "ff02::1", ip, link.mac, NA_FLAG_OVERRIDE)
            frame = ethernet(multicast_mac("ff02::1"), link.mac, ETH_P_IPV6, packet)
            link.sock.send(frame)
