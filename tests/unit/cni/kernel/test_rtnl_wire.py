# SPDX-License-Identifier: Apache-2.0
"""The rtnetlink wire format and request loop, against hand-built kernel answers.

``RtnlSocket`` runs over one end of a datagram socketpair; the test plays the
kernel on the other end. Numbers from include/uapi/linux/netlink.h:
NLMSG_ERROR=2, NLMSG_DONE=3, NLM_F_REQUEST=1, NLM_F_MULTI=2, NLM_F_ACK=4,
NLM_F_DUMP_INTR=0x10, NLM_F_DUMP=0x300, NLM_F_CAPPED=0x100,
NLM_F_ACK_TLVS=0x200, NLMSGERR_ATTR_MSG=1; rtnetlink.h: RTM_NEWLINK=16,
RTM_GETLINK=18, RTM_SETLINK=19.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from cni.kernel import rtnl
from cni.kernel.rtnl import DumpInterrupted, NetlinkErrno, RtnlSocket

EINVAL, ENODEV, EMSGSIZE = 22, 19, 90


def header(length: int, kind: int, flags: int, seq: int) -> bytes:
    return struct.pack("=IHHII", length, kind, flags, seq, 0)


def message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    raw = header(16 + len(body), kind, flags, seq) + body
    return raw + b"\0" * (-len(raw) % 4)


def error(seq: int, code: int, flags: int = 0, tail: bytes = b"") -> bytes:
    # struct nlmsgerr: int error; struct nlmsghdr msg (the request's header).
    return message(
        2, flags, seq, struct.pack("=i", -code) + header(32, 19, 5, seq) + tail
    )


class Kernel:
    """The far end: reads what the socket sent, answers with scripted datagrams."""

    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock = RtnlSocket(self.ours)

    def sent(self) -> tuple[int, int, int, int, bytes]:
        raw = self.theirs.recv(1 << 16)
        length, kind, flags, seq, _pid = struct.unpack_from("=IHHII", raw)
        assert length == len(raw)
        return kind, flags, seq, length, raw[16:]

    def answer(self, *datagrams: bytes) -> None:
        for datagram in datagrams:
            self.theirs.send(datagram)

    def close(self) -> None:
        self.sock.close()
        self.theirs.close()


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    k = Kernel()
    try:
        yield k
    finally:
        k.close()


def test_attributes_are_padded_to_four_bytes_and_read_back_in_order():
    packed = rtnl.attr_str(3, "net1") + rtnl.attr_u32(4, 9000) + rtnl.attr(1, b"\x02")
    assert packed[:12] == struct.pack("=HH", 9, 3) + b"net1\0\0\0\0"
    assert list(rtnl.iter_attrs(packed)) == [
        (3, b"net1\0"),
        (4, struct.pack("=I", 9000)),
        (1, b"\x02"),
    ]


def test_nested_and_byte_order_flags_are_not_part_of_the_type():
    packed = rtnl.attr(52 | 0x8000, rtnl.attr_str(53, "alt")) + rtnl.attr(
        6 | 0x4000, b"x"
    )
    assert sorted(rtnl.attrs(packed)) == [6, 52]


def test_addresses_pack_by_family():
    assert rtnl.attr_ip(1, "10.0.0.1")[4:] == bytes([10, 0, 0, 1])
    assert rtnl.attr_ip(1, "fd00::1")[4:] == socket.inet_pton(
        socket.AF_INET6, "fd00::1"
    )
    assert rtnl.attr_mac(1, "02:AA:bb:00:00:01")[4:10] == bytes.fromhex("02aabb000001")


def test_a_request_is_one_message_with_a_fresh_sequence_number(kernel):
    kernel.answer(error(1, 0))
    assert kernel.sock.request(19, 5, b"body") == []
    assert kernel.sent() == (19, 5, 1, 20, b"body")
    kernel.answer(error(2, 0))
    kernel.sock.request(19, 5, b"")
    assert kernel.sent()[2] == 2


def test_an_answer_without_ack_is_the_single_message_that_came(kernel):
    kernel.answer(message(16, 0, 1, b"link"))
    [got] = kernel.sock.request(18, 1, b"")
    assert (got.type, got.body) == (16, b"link")


def test_a_refusal_carries_the_errno_and_the_kernels_reason(kernel):
    said = rtnl.attr_str(1, "MTU greater than device maximum")
    kernel.answer(error(1, EINVAL, flags=0x100 | 0x200, tail=said))
    with pytest.raises(NetlinkErrno) as caught:
        kernel.sock.request(19, 5, b"")
    assert caught.value.errno == EINVAL
    assert caught.value.kernel_says == "MTU greater than device maximum"


def test_a_refusal_without_extended_ack_has_no_reason(kernel):
    kernel.answer(error(1, ENODEV))
    with pytest.raises(NetlinkErrno) as caught:
        kernel.sock.request(18, 1, b"")
    assert (caught.value.errno, caught.value.kernel_says) == (ENODEV, "")


def test_answers_to_an_abandoned_request_are_skipped(kernel):
    kernel.answer(error(7, ENODEV), message(16, 0, 1, b"mine"))
    [got] = kernel.sock.request(18, 1, b"")
    assert got.body == b"mine"


def test_a_dump_is_read_across_datagrams_until_done(kernel):
    kernel.answer(
        message(16, 2, 1, b"lo") + message(16, 2, 1, b"eth0"),
        message(16, 2, 1, b"net1") + message(3, 2, 1, struct.pack("=i", 0)),
    )
    got = kernel.sock.request(18, 0x301, b"")
    assert [m.body for m in got] == [b"lo", b"eth0", b"net1"]


def test_a_dump_whose_table_changed_is_reported_after_it_was_drained(kernel):
    kernel.answer(
        message(16, 2 | 0x10, 1, b"lo"), message(3, 2, 1, struct.pack("=i", 0))
    )
    with pytest.raises(DumpInterrupted):
        kernel.sock.request(18, 0x301, b"")
    # Nothing of the interrupted dump is left to be read as the next answer.
    kernel.answer(error(2, 0))
    assert kernel.sock.request(19, 5, b"") == []


def test_a_dump_that_fails_at_its_end_raises_the_errno(kernel):
    kernel.answer(message(3, 2, 1, struct.pack("=i", -EINVAL)))
    with pytest.raises(NetlinkErrno) as caught:
        kernel.sock.request(18, 0x301, b"")
    assert caught.value.errno == EINVAL


def test_a_datagram_larger_than_the_buffer_is_an_error_not_a_short_read(kernel):
    kernel.answer(message(16, 0, 1, b"x" * rtnl.RECV_SIZE))
    with pytest.raises(NetlinkErrno) as caught:
        kernel.sock.request(18, 1, b"")
    assert caught.value.errno == EMSGSIZE
