# SPDX-License-Identifier: Apache-2.0
"""RDMA statistics over nldev, byte for byte against the uapi numbers.

Expected bytes are built with ``struct`` from rdma/rdma_netlink.h (checked by
compiling a C program printing the enum values against linux-libc-dev 6.1):
RDMA_NL_NLDEV = 5, ``RDMA_NL_GET_TYPE(client, op) = (client << 10) + op``;
RDMA_NLDEV_CMD_GET = 1, RDMA_NLDEV_CMD_STAT_GET = 17; attributes DEV_INDEX = 1
(u32), DEV_NAME = 2 (string), PORT_INDEX = 3 (u32), NODE_GUID = 6 (u64),
SYS_IMAGE_GUID = 7 (u64), STAT_HWCOUNTERS = 80 (nested), STAT_HWCOUNTER_ENTRY
= 81 (nested), ENTRY_NAME = 82 (string), ENTRY_VALUE = 83 (u64). NLA_F_NESTED
is 0x8000 (linux/netlink.h); the kernel sets it on nests (nla_nest_start).
"""

from __future__ import annotations

import struct
from contextlib import nullcontext
from typing import Any

from cni.kernel.nldev import dev_dump_request, nldevmsg, stat_get_request
from cni.kernel.rdma_stats import NetlinkRdmaStats
from cni.kernel.stats import RdmaStats

NLM_F_REQUEST, NLM_F_DUMP, NLM_F_MULTI = 0x1, 0x300, 0x2
TYPE_GET = (5 << 10) + 1
TYPE_STAT_GET = (5 << 10) + 17
NESTED = 0x8000


def hdr(length: int, mtype: int, flags: int, seq: int = 1, pid: int = 0) -> bytes:
    return struct.pack("=IHHII", length, mtype, flags, seq, pid)


def nla(atype: int, payload: bytes) -> bytes:
    pad = (4 - len(payload) % 4) % 4
    return struct.pack("=HH", 4 + len(payload), atype) + payload + b"\0" * pad


def u32(atype: int, value: int) -> bytes:
    return nla(atype, struct.pack("=I", value))


def u64(atype: int, value: int) -> bytes:
    return nla(atype, struct.pack("=Q", value))


def string(atype: int, value: str) -> bytes:
    return nla(atype, value.encode() + b"\0")


def message(mtype: int, flags: int, attrs: bytes) -> bytes:
    return hdr(16 + len(attrs), mtype, flags) + attrs


def encoded(msg: nldevmsg) -> bytes:
    msg["header"]["sequence_number"] = 1
    msg["header"]["pid"] = 0
    msg.encode()
    return bytes(msg.data)


def decoded(data: bytes) -> nldevmsg:
    msg = nldevmsg(data)
    msg.decode()
    return msg


def test_device_dump_request_is_nldev_get_with_dump_flags() -> None:
    assert encoded(dev_dump_request()) == message(
        TYPE_GET, NLM_F_REQUEST | NLM_F_DUMP, b""
    )


def test_stat_get_request_names_device_and_port() -> None:
    assert encoded(stat_get_request(7)) == message(
        TYPE_STAT_GET, NLM_F_REQUEST, u32(1, 7) + u32(3, 1)
    )


DEVICE_REPLY = message(
    TYPE_GET,
    NLM_F_MULTI,
    u32(1, 7)
    + string(2, "mlx5_3")
    + u64(6, 0xB83FAA0000010002)
    + u64(7, 0xB83FAA000001FFFF),
)
STAT_REPLY = message(
    TYPE_STAT_GET,
    0,
    u32(1, 7)
    + u32(3, 1)
    + nla(
        80 | NESTED,
        nla(81 | NESTED, string(82, "out_of_sequence") + u64(83, 12))
        + nla(81 | NESTED, string(82, "np_cnp_sent") + u64(83, 2**40)),
    ),
)


class FakeSocket:
    """Plays the kernel: answers each request type with fixed replies."""

    def __init__(self, replies: dict[int, list[bytes]]) -> None:
        self.replies = replies
        self.requests: list[bytes] = []
        self.closed = False

    def nlm_request(self, msg: Any, msg_type: int, msg_flags: int) -> list[Any]:
        self.requests.append(encoded(msg))
        return [decoded(data) for data in self.replies[msg_type]]

    def close(self) -> None:
        self.closed = True


class NothingInSysfs:
    def read(self, pci: str, device: str, netns: str | None = None) -> None:
        return None


def test_pod_device_is_read_in_its_netns_over_nldev() -> None:
    sock = FakeSocket({TYPE_GET: [DEVICE_REPLY], TYPE_STAT_GET: [STAT_REPLY]})
    entered: list[str] = []

    def enter(netns: str) -> nullcontext[None]:
        entered.append(netns)
        return nullcontext()

    source = NetlinkRdmaStats(NothingInSysfs(), lambda: sock, enter)
    found = source.read("0000:af:00.3", "mlx5_3", "/run/netns/pod")
    assert found == (
        "mlx5_3",
        RdmaStats(
            node_guid="b83f:aa00:0001:0002",
            sys_image_guid="b83f:aa00:0001:ffff",
            counters={"out_of_sequence": 12, "np_cnp_sent": 2**40},
        ),
    )
    assert entered == ["/run/netns/pod"]
    assert sock.requests[1] == message(
        TYPE_STAT_GET, NLM_F_REQUEST, u32(1, 7) + u32(3, 1)
    )
    assert sock.closed


def test_device_not_in_the_netns_reads_nothing() -> None:
    sock = FakeSocket({TYPE_GET: [], TYPE_STAT_GET: []})
    source = NetlinkRdmaStats(NothingInSysfs(), lambda: sock, lambda _: nullcontext())
    assert source.read("0000:af:00.3", "mlx5_3", "/run/netns/pod") is None
    assert sock.closed


def test_host_visible_device_never_opens_a_socket() -> None:
    stats = RdmaStats("a", "a", {"out_of_buffer": 1}, 0)

    class Sysfs:
        def read(self, pci: str, device: str, netns: str | None = None) -> Any:
            return ("mlx5_0", stats)

    def no_socket() -> Any:
        raise AssertionError("netlink used for a device sysfs shows")

    assert NetlinkRdmaStats(Sysfs(), no_socket).read("p", "mlx5_0", None) == (
        "mlx5_0",
        stats,
    )
