# SPDX-License-Identifier: Apache-2.0
"""PyRoute2Links message handling without a kernel (no root).

Dump retry on NLM_F_DUMP_INTR (bounded), and LinkInfo decoding from a hand-built
RTM_NEWLINK (include/uapi/linux/if_link.h: IFLA_ADDRESS=1, IFLA_IFNAME=3,
IFLA_MTU=4, IFLA_PERM_ADDRESS=54; ARPHRD_INFINIBAND=32; IFF_UP=1).
"""

from __future__ import annotations

import struct

import pytest
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from cni.kernel import KernelError
from cni.kernel.links import DUMP_ATTEMPTS, PyRoute2Links

NLM_F_MULTI, NLM_F_DUMP_INTR = 0x2, 0x10  # include/uapi/linux/netlink.h


def link_msg(name: str, interrupted: bool) -> ifinfmsg:
    msg = ifinfmsg()
    msg["index"] = 1
    msg["flags"] = 0
    msg["ifi_type"] = 772
    msg["attrs"] = [("IFLA_IFNAME", name), ("IFLA_MTU", 65536)]
    msg["header"]["flags"] = NLM_F_MULTI | (NLM_F_DUMP_INTR if interrupted else 0)
    return msg


class ScriptedChannel:
    """Answers each dump with the next scripted batch of messages."""

    def __init__(self, batches: list[list[ifinfmsg]]) -> None:
        self.batches = batches
        self.requests = 0

    def request(self, msg, msg_type, flags):
        self.requests += 1
        return self.batches.pop(0)

    def close(self) -> None:
        pass


class ScriptedLinks(PyRoute2Links):
    def __init__(self, chan: ScriptedChannel) -> None:
        self.chan = chan
        super().__init__()

    def _open_channel(self, netns_fd: int) -> ScriptedChannel:
        return self.chan


def test_an_interrupted_dump_is_repeated_until_consistent():
    chan = ScriptedChannel(
        [[link_msg("lo", True)], [link_msg("lo", True)], [link_msg("lo", False)]]
    )
    links = ScriptedLinks(chan)
    try:
        assert [ln.name for ln in links.list()] == ["lo"]
    finally:
        links.close()
    assert chan.requests == 3


def test_a_dump_interrupted_every_time_gives_up():
    chan = ScriptedChannel([[link_msg("lo", True)] for _ in range(DUMP_ATTEMPTS)])
    links = ScriptedLinks(chan)
    try:
        with pytest.raises(KernelError, match="interrupted"):
            links.list()
    finally:
        links.close()
    assert chan.requests == DUMP_ATTEMPTS


def nlattr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\x00" * (-len(raw) % 4)


IPOIB_ADDR = bytes.fromhex("00000248fe800000000000000002c90300a1b2c3")


def ipoib_newlink() -> ifinfmsg:
    body = struct.pack("=BxHiII", 0, 32, 9, 1, 0)  # ARPHRD_INFINIBAND, IFF_UP
    body += nlattr(3, b"ib0\0") + nlattr(4, struct.pack("=I", 2044))
    body += nlattr(1, IPOIB_ADDR) + nlattr(54, IPOIB_ADDR)
    raw = struct.pack("=IHHII", 16 + len(body), 16, 0, 1, 0) + body
    msg = ifinfmsg(raw)
    msg.decode()
    return msg


def test_ipoib_link_keeps_its_20_byte_address():
    links = ScriptedLinks(ScriptedChannel([[ipoib_newlink()]]))
    try:
        info = links.get("ib0")
    finally:
        links.close()
    text = ":".join(f"{b:02x}" for b in IPOIB_ADDR)
    assert (info.name, info.index, info.mtu, info.up, info.link_type) == (
        "ib0",
        9,
        2044,
        True,
        32,
    )
    assert info.mac == text
    assert info.permanent_mac == text
