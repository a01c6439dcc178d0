# SPDX-License-Identifier: Apache-2.0
"""A peer on a simulated rail asking "who has <ip>?" and hearing every answer.

The fabric's bridge is the peer: an ARP request from its address, broadcast to
every port, then every reply collected for a short while. Which MACs answer
shows ARP flux (several NICs of one pod answering for one address) directly,
where the kernel's neighbour cache would keep only the last answer.
"""

from __future__ import annotations

import select
import socket
import struct
import time

from cni.kernel.netns import in_netns
from cni.kernel.probes import (
    ARPOP_REPLY,
    ARPOP_REQUEST,
    BROADCAST,
    ETH_P_ARP,
    ZERO_MAC,
    arp_packet,
    ethernet,
    parse_arp,
)

SIOCGIFHWADDR = 0x8927


def who_has(
    fabric_netns: str, dev: str, sender_ip: str, target_ip: str, wait: float = 0.15
) -> set[str]:
    """The MACs that reply to ``dev``'s ARP request for ``target_ip``."""
    import fcntl

    with in_netns(f"/var/run/netns/{fabric_netns}"):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP))
    try:
        sock.bind((dev, ETH_P_ARP))
        hw = fcntl.ioctl(sock, SIOCGIFHWADDR, struct.pack("16s16x", dev.encode()))
        mac = hw[18:24]
        body = arp_packet(ARPOP_REQUEST, mac, sender_ip, ZERO_MAC, target_ip)
        sock.send(ethernet(BROADCAST, mac, ETH_P_ARP, body))
        answers: set[str] = set()
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([sock], [], [], left)
            if not ready:
                break
            arp = parse_arp(sock.recv(65535))
            if arp and arp.op == ARPOP_REPLY and arp.spa == target_ip:
                answers.add(arp.sha)
        return answers
    finally:
        sock.close()
