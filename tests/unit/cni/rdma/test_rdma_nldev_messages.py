# SPDX-License-Identifier: Apache-2.0
"""The plugins' nldev messages (cni.kernel.nldev), byte for byte against the uapi.

Expected bytes are built by hand with ``struct`` from the numbers in the kernel
uapi headers, not from the module's constants:

- linux/netlink.h: ``#define NETLINK_RDMA 20``; nlmsghdr = u32 len, u16 type,
  u16 flags, u32 seq, u32 pid; NLM_F_REQUEST 0x1, NLM_F_MULTI 0x2,
  NLM_F_ACK 0x4, NLM_F_DUMP 0x300; NLMSG_ERROR 2, NLMSG_DONE 3.
- rdma/rdma_netlink.h: ``RDMA_NL_NLDEV`` = 5 (RDMA_NL_IWCM = 2, RSVD, LS, NLDEV);
  ``RDMA_NL_GET_TYPE(client, op) ((client << 10) + op)``;
  enum rdma_nldev_command: GET = 1, SET = 2, SYS_GET = 6;
  enum rdma_nldev_attr: DEV_INDEX = 1 (u32), DEV_NAME = 2 (string),
  SYS_ATTR_NETNS_MODE = 66 (u8), NET_NS_FD = 68 (u32).
  (Verified against linux-libc-dev 6.1 /usr/include/rdma/rdma_netlink.h by
  compiling a C program printing the enum values.)
- drivers/infiniband/core/nldev.c: the SYS_GET reply puts
  ``(u8)ib_devices_shared_netns`` in NETNS_MODE, so 1 = shared, 0 = exclusive.
"""

from __future__ import annotations

import struct

import pytest

from cni.kernel import NotSupported
from cni.kernel.nldev import (
    NETLINK_RDMA,
    dev_dump_request,
    nldevmsg,
    parse_devices,
    parse_netns_mode,
    set_netns_request,
    sys_get_request,
)

NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
TYPE_GET = (5 << 10) + 1
TYPE_SET = (5 << 10) + 2
TYPE_SYS_GET = (5 << 10) + 6


def hdr(length: int, mtype: int, flags: int, seq: int, pid: int) -> bytes:
    return struct.pack("=IHHII", length, mtype, flags, seq, pid)


def nla_u32(atype: int, value: int) -> bytes:
    return struct.pack("=HHI", 8, atype, value)


def nla_u8(atype: int, value: int) -> bytes:
    return struct.pack("=HHB", 5, atype, value) + b"\0" * 3


def nla_str(atype: int, value: str) -> bytes:
    raw = value.encode() + b"\0"
    pad = (4 - len(raw) % 4) % 4
    return struct.pack("=HH", 4 + len(raw), atype) + raw + b"\0" * pad


def encoded(msg: nldevmsg, seq: int, pid: int) -> bytes:
    msg["header"]["sequence_number"] = seq
    msg["header"]["pid"] = pid
    msg.encode()
    return bytes(msg.data)


def decoded(data: bytes) -> nldevmsg:
    msg = nldevmsg(data)
    msg.decode()
    return msg


def test_netlink_family_number_is_the_uapi_one() -> None:
    assert NETLINK_RDMA == 20


def test_sys_get_request_is_a_bare_header_of_type_0x1406_with_ack() -> None:
    expected = hdr(16, 0x1406, NLM_F_REQUEST | NLM_F_ACK, 7, 4242)
    assert TYPE_SYS_GET == 0x1406
    assert encoded(sys_get_request(), 7, 4242) == expected


def test_device_dump_request_is_type_0x1401_with_dump_flags() -> None:
    expected = hdr(16, 0x1401, NLM_F_REQUEST | NLM_F_DUMP, 1, 99)
    assert TYPE_GET == 0x1401
    assert encoded(dev_dump_request(), 1, 99) == expected


def test_move_request_carries_dev_index_then_net_ns_fd() -> None:
    body = nla_u32(1, 3) + nla_u32(68, 11)
    expected = hdr(16 + len(body), 0x1402, NLM_F_REQUEST | NLM_F_ACK, 5, 77) + body
    assert TYPE_SET == 0x1402
    assert encoded(set_netns_request(3, 11), 5, 77) == expected


def test_sys_get_reply_with_mode_0_is_exclusive() -> None:
    body = nla_u8(66, 0)
    reply = hdr(16 + len(body), TYPE_SYS_GET, 0, 7, 4242) + body
    assert parse_netns_mode(decoded(reply)) == "exclusive"


def test_sys_get_reply_with_mode_1_is_shared() -> None:
    body = nla_u8(66, 1)
    reply = hdr(16 + len(body), TYPE_SYS_GET, 0, 7, 4242) + body
    assert parse_netns_mode(decoded(reply)) == "shared"


def test_sys_get_reply_without_the_mode_attribute_is_not_supported() -> None:
    reply = hdr(16, TYPE_SYS_GET, 0, 7, 4242)
    with pytest.raises(NotSupported, match="NETNS_MODE"):
        parse_netns_mode(decoded(reply))


def test_device_dump_replies_map_names_to_indexes() -> None:
    replies = []
    for index, name in ((1, "mlx5_0"), (27, "mlx5_27")):
        # The kernel puts more attributes (FW version, node GUID, ...) around
        # the two we read; an unknown one (3 = PORT_INDEX u32) must be skipped.
        body = nla_u32(1, index) + nla_str(2, name) + nla_u32(3, 1)
        replies.append(decoded(hdr(16 + len(body), TYPE_GET, NLM_F_MULTI, 9, 1) + body))
    assert {n: d.index for n, d in parse_devices(replies).items()} == {
        "mlx5_0": 1,
        "mlx5_27": 27,
    }


def test_dev_name_attribute_encodes_nul_terminated_and_padded() -> None:
    msg = nldevmsg()
    msg["header"]["type"] = TYPE_GET
    msg["header"]["flags"] = NLM_F_MULTI
    msg["attrs"] = [
        ("RDMA_NLDEV_ATTR_DEV_INDEX", 2),
        ("RDMA_NLDEV_ATTR_DEV_NAME", "mlx5_1"),
    ]
    body = nla_u32(1, 2) + nla_str(2, "mlx5_1")
    assert encoded(msg, 3, 4) == hdr(16 + len(body), TYPE_GET, NLM_F_MULTI, 3, 4) + body
