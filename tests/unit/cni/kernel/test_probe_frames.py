# SPDX-License-Identifier: Apache-2.0
"""ARP / NDP frames built by cni.kernel.probes, checked against the RFC layouts."""

from __future__ import annotations

import ipaddress
import struct

from cni.kernel.probes import (
    NA_FLAG_OVERRIDE,
    Advert,
    Arp,
    arp_packet,
    checksum,
    ethernet,
    icmpv6_checksum,
    multicast_mac,
    neighbor_advert,
    neighbor_solicit,
    parse_arp,
    parse_na,
    solicited_node,
)

MAC = bytes.fromhex("020000aabb01")
POD6 = "fd00:11::5"


def test_rfc1071_checksum_example():
    # RFC 1071 section 3 example: 0001 f203 f4f5 f6f7 sums to ddf2 -> ~ = 220d.
    assert checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D


def test_rfc5227_probe_frame_bytes():
    body = arp_packet(1, MAC, "0.0.0.0", b"\0" * 6, "172.16.11.5")
    frame = ethernet(b"\xff" * 6, MAC, 0x0806, body)
    expected = (
        b"\xff" * 6
        + MAC
        + b"\x08\x06"  # ethertype ARP
        + b"\x00\x01\x08\x00\x06\x04\x00\x01"  # htype 1, ptype IPv4, 6, 4, request
        + MAC
        + bytes(4)  # sender IP 0.0.0.0 (RFC 5227 2.1.1)
        + bytes(6)
        + bytes([172, 16, 11, 5])
    )
    assert frame == expected.ljust(60, b"\0")
    assert parse_arp(frame) == Arp(
        1, "02:00:00:aa:bb:01", "0.0.0.0", "00:00:00:00:00:00", "172.16.11.5"
    )


def test_parse_arp_ignores_other_ethertypes():
    assert parse_arp(ethernet(b"\xff" * 6, MAC, 0x86DD, bytes(40))) is None


def test_solicited_node_and_multicast_mac():
    assert solicited_node("fd00:11::1:2:3:4") == "ff02::1:ff03:4"
    assert multicast_mac("ff02::1:ff03:4") == bytes.fromhex("3333ff030004")


def _verify_icmpv6(packet: bytes) -> None:
    src, dst = packet[8:24], packet[24:40]
    icmp = packet[40:]
    assert struct.unpack("!H", packet[4:6])[0] == len(icmp)
    # A correct checksum makes the sum over pseudo-header + message fold to 0.
    assert icmpv6_checksum(src, dst, icmp) == 0


def test_dad_neighbor_solicit_layout():
    packet = neighbor_solicit("::", POD6, None)
    version, plen, nxt, hops = struct.unpack("!IHBB", packet[:8])
    assert (version >> 28, nxt, hops) == (6, 58, 255)
    assert packet[8:24] == bytes(16)  # unspecified source: DAD
    assert packet[24:40] == ipaddress.IPv6Address("ff02::1:ff00:5").packed
    assert packet[40] == 135 and packet[41] == 0
    assert packet[48:64] == ipaddress.IPv6Address(POD6).packed
    assert plen == 24  # no source link-layer option with an unspecified source
    _verify_icmpv6(packet)


def test_gateway_neighbor_solicit_carries_source_lladdr():
    packet = neighbor_solicit(POD6, "fd00:11::fe", MAC)
    assert packet[64:72] == b"\x01\x01" + MAC  # option 1, length 1 (8 bytes)
    _verify_icmpv6(packet)


def test_unsolicited_advert_round_trips_through_the_parser():
    packet = neighbor_advert(POD6, "ff02::1", POD6, MAC, NA_FLAG_OVERRIDE)
    _verify_icmpv6(packet)
    assert packet[64:72] == b"\x02\x01" + MAC  # target link-layer option
    frame = ethernet(multicast_mac("ff02::1"), MAC, 0x86DD, packet)
    assert parse_na(frame) == Advert(POD6, POD6, NA_FLAG_OVERRIDE, "02:00:00:aa:bb:01")


def test_parse_na_falls_back_to_the_ethernet_source_without_option():
    body = struct.pack("!BBHI", 136, 0, 0, 0) + ipaddress.IPv6Address(POD6).packed
    header = struct.pack("!IHBB", 6 << 28, len(body), 58, 255)
    src = ipaddress.IPv6Address("fe80::1").packed
    dst = ipaddress.IPv6Address("ff02::1").packed
    frame = ethernet(b"\x33\x33\0\0\0\1", MAC, 0x86DD, header + src + dst + body)
    advert = parse_na(frame)
    assert advert is not None and advert.mac == "02:00:00:aa:bb:01"


def test_parse_na_ignores_a_neighbor_solicit():
    frame = ethernet(
        b"\x33\x33\xff\0\0\5", MAC, 0x86DD, neighbor_solicit("::", POD6, None)
    )
    assert parse_na(frame) is None


def test_ipoib_links_are_skipped_with_a_log_line(caplog):
    from cni.kernel.probes import _ipoib_skip, _Link

    caplog.set_level("INFO", logger="cni.kernel.probes")
    ipoib = _Link(sock=None, mac=b"", hwtype=32)  # type: ignore[arg-type]
    assert _ipoib_skip(ipoib, "ib0", "ARP conflict probe")
    assert "ARP conflict probe on ib0 skipped: IPoIB" in caplog.text
    ether = _Link(sock=None, mac=b"", hwtype=1)  # type: ignore[arg-type]
    assert not _ipoib_skip(ether, "net1", "ARP conflict probe")
