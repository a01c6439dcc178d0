# SPDX-License-Identifier: Apache-2.0
"""NetlinkLinks message handling without a kernel (no root).

Dump retry on NLM_F_DUMP_INTR (bounded), and LinkInfo decoding from a hand-built
RTM_NEWLINK (include/uapi/linux/if_link.h: IFLA_ADDRESS=1, IFLA_IFNAME=3,
IFLA_MTU=4, IFLA_LINKINFO=18 with IFLA_INFO_KIND=1, IFLA_PROP_LIST=52 with
IFLA_ALT_IFNAME=53, IFLA_PERM_ADDRESS=54; ARPHRD_INFINIBAND=32; IFF_UP=1).
"""

from __future__ import annotations

import struct

import pytest

from cni.kernel import InvalidArgument, KernelError
from cni.kernel.links import DUMP_ATTEMPTS, NetlinkLinks
from cni.kernel.rtnl import DumpInterrupted, Message, NetlinkErrno

RTM_NEWLINK = 16  # include/uapi/linux/rtnetlink.h
EINVAL = 22


def nlattr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\x00" * (-len(raw) % 4)


def newlink(
    name: str, index: int = 1, link_type: int = 772, extra: bytes = b""
) -> Message:
    body = struct.pack("=BxHiII", 0, link_type, index, 0, 0)
    body += nlattr(3, name.encode() + b"\0") + nlattr(4, struct.pack("=I", 65536))
    return Message(RTM_NEWLINK, 0, body + extra)


class ScriptedChannel:
    """Answers each request with the next scripted outcome (messages or an error)."""

    def __init__(self, outcomes: list[list[Message] | Exception]) -> None:
        self.outcomes = outcomes
        self.requests = 0

    def request(self, msg_type: int, flags: int, body: bytes) -> list[Message]:
        self.requests += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def close(self) -> None:
        pass


class ScriptedLinks(NetlinkLinks):
    def __init__(self, chan: ScriptedChannel) -> None:
        self.chan = chan
        super().__init__()

    def _open_channel(self, netns_fd: int) -> ScriptedChannel:
        return self.chan


def test_an_interrupted_dump_is_repeated_until_consistent():
    chan = ScriptedChannel([DumpInterrupted(), DumpInterrupted(), [newlink("lo")]])
    links = ScriptedLinks(chan)
    try:
        assert [ln.name for ln in links.list()] == ["lo"]
    finally:
        links.close()
    assert chan.requests == 3


def test_a_dump_interrupted_every_time_gives_up():
    chan = ScriptedChannel([DumpInterrupted() for _ in range(DUMP_ATTEMPTS)])
    links = ScriptedLinks(chan)
    try:
        with pytest.raises(KernelError, match="interrupted"):
            links.list()
    finally:
        links.close()
    assert chan.requests == DUMP_ATTEMPTS


IPOIB_ADDR = bytes.fromhex("00000248fe800000000000000002c90300a1b2c3")


def test_ipoib_link_keeps_its_20_byte_address():
    body = struct.pack("=BxHiII", 0, 32, 9, 1, 0)  # ARPHRD_INFINIBAND, IFF_UP
    body += nlattr(3, b"ib0\0") + nlattr(4, struct.pack("=I", 2044))
    body += nlattr(1, IPOIB_ADDR) + nlattr(54, IPOIB_ADDR)
    links = ScriptedLinks(ScriptedChannel([[Message(RTM_NEWLINK, 0, body)]]))
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


def test_kind_and_altnames_come_from_their_nested_attributes():
    nested = 0x8000  # NLA_F_NESTED, set by the kernel on nested attributes
    linkinfo = nlattr(18 | nested, nlattr(1, b"veth\0"))
    props = nlattr(52 | nested, nlattr(53, b"enp1s0f0v3\0") + nlattr(53, b"rail3\0"))
    links = ScriptedLinks(ScriptedChannel([[newlink("net1", extra=linkinfo + props)]]))
    try:
        info = links.get("net1")
    finally:
        links.close()
    assert info.kind == "veth"
    assert info.altnames == ("enp1s0f0v3", "rail3")
    assert info.permanent_mac is None  # no IFLA_PERM_ADDRESS


def test_a_refusal_names_the_step_the_errno_and_the_kernels_reason():
    refusal = NetlinkErrno(EINVAL, "MTU greater than device maximum")
    links = ScriptedLinks(ScriptedChannel([refusal]))
    try:
        with pytest.raises(InvalidArgument) as caught:
            links.set_mtu("net1", 70000, None)
    finally:
        links.close()
    assert str(caught.value) == (
        "set net1 mtu 70000: Invalid argument (MTU greater than device maximum)"
    )
    assert caught.value.errno == EINVAL
