# SPDX-License-Identifier: Apache-2.0
"""rtnetlink on the wire: messages packed and read with ``struct``, one blocking socket.

May import: the standard library only.

Why not pyroute2 here: the plugins' hot path is ~17 rtnetlink requests per NIC,
and pyroute2 0.9 spends ~0.55 ms of Python on each (its asyncio request engine,
and decoding every attribute of a ~1 KB RTM_NEWLINK), against ~0.04 ms for the
same request packed and read here; opening its socket costs ~0.7 ms against
~0.05; importing it loads the whole package (~150 ms). The plugins send a
handful of fixed-layout messages (links, addresses, routes, rules, and the
PF-side VF settings of ``cni.kernel.vf``) and read a few attributes of each
answer, which is all this module knows. pyroute2 stays for the RDMA seam
(``cni.kernel.rdma``: NETLINK_RDMA, loaded only when a command moves an RDMA
device).

Every number below is from the kernel's uapi headers, named in each block.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# include/uapi/linux/netlink.h
NETLINK_ROUTE = 0
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_ACK_TLVS = 0x200  # on an NLMSG_ERROR: extended-ack attributes follow
NLM_F_CAPPED = 0x100  # on an NLMSG_ERROR: the request is not echoed back
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
NLMSGERR_ATTR_MSG = 1
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER

# include/uapi/linux/rtnetlink.h
RTM_NEWLINK = 16
RTM_GETLINK = 18
RTM_SETLINK = 19
RTM_NEWADDR = 20
RTM_DELADDR = 21
RTM_GETADDR = 22
RTM_NEWROUTE = 24
RTM_DELROUTE = 25
RTM_GETROUTE = 26
RTM_NEWRULE = 32
RTM_DELRULE = 33
RTM_GETRULE = 34
RTM_DELLINKPROP = 109

# include/uapi/linux/if_link.h
IFLA_ADDRESS = 1
IFLA_IFNAME = 3
IFLA_MTU = 4
IFLA_LINKINFO = 18
IFLA_INFO_KIND = 1  # inside IFLA_LINKINFO
IFLA_NET_NS_FD = 28
IFLA_EXT_MASK = 29
IFLA_PROP_LIST = 52
IFLA_ALT_IFNAME = 53
IFLA_PERM_ADDRESS = 54

# include/uapi/linux/if_addr.h
IFA_ADDRESS = 1
IFA_LOCAL = 2
IFA_BROADCAST = 4
IFA_FLAGS = 8

# include/uapi/linux/rtnetlink.h (route attributes and metrics)
RTA_DST = 1
RTA_OIF = 4
RTA_GATEWAY = 5
RTA_PRIORITY = 6
RTA_PREFSRC = 7
RTA_METRICS = 8
RTA_TABLE = 15
RTAX_MTU = 2
RTAX_ADVMSS = 8

# include/uapi/linux/fib_rules.h
FRA_SRC = 2
FRA_PRIORITY = 6
FRA_TABLE = 15

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_U32 = struct.Struct("=I")
_I32 = struct.Struct("=i")
_NLA = struct.Struct("=HH")  # len, type
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
#: family, dst_len, src_len, tos, table, protocol, scope, type; flags
RTMSG = struct.Struct("=BBBBBBBBI")
#: family, dst_len, src_len, tos, table, res1, res2, action; flags
FIB_RULE_HDR = RTMSG
#: The largest datagram read at once. The kernel sizes a dump's datagrams from
#: the reader's buffer, up to 32 KiB; a single answer here is ~1-2 KiB.
RECV_SIZE = 1 << 16


class NetlinkErrno(OSError):
    """The kernel refused a request; ``errno`` positive, ``kernel_says`` the
    extended-ack text when the kernel gave one (e.g. "MTU greater than device
    maximum")."""

    def __init__(self, code: int, kernel_says: str = "") -> None:
        super().__init__(code, os.strerror(code))
        self.kernel_says = kernel_says


class DumpInterrupted(Exception):
    """A dump's table changed while it was read (NLM_F_DUMP_INTR): read it again."""


# ---------------------------------------------------------------- attributes


def attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    raw = _NLA.pack(4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def nested(kind: int, payload: bytes) -> bytes:
    """An attribute holding attributes (flagged: the kernel's strict
    validation requires NLA_F_NESTED on newer ones such as IFLA_PROP_LIST)."""
    return attr(kind | NLA_F_NESTED, payload)


def attr_u32(kind: int, value: int) -> bytes:
    return attr(kind, _U32.pack(value))


def attr_str(kind: int, value: str) -> bytes:
    return attr(kind, value.encode() + b"\0")


def attr_ip(kind: int, address: str) -> bytes:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return attr(kind, socket.inet_pton(family, address))


def attr_mac(kind: int, mac: str) -> bytes:
    return attr(kind, bytes.fromhex(mac.replace(":", "")))


def attrs(data: bytes, offset: int = 0, end: int | None = None) -> dict[int, bytes]:
    """The attributes in ``data[offset:end]`` by type (the last one of a type wins)."""
    return dict(iter_attrs(data, offset, end))


def iter_attrs(
    data: bytes, offset: int = 0, end: int | None = None
) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each attribute in order, flag bits cleared."""
    stop = len(data) if end is None else end
    while offset + 4 <= stop:
        length, kind = _NLA.unpack_from(data, offset)
        if length < 4 or offset + length > stop:
            return
        yield kind & NLA_TYPE_MASK, data[offset + 4 : offset + length]
        offset += (length + 3) & ~3


def u32(payload: bytes) -> int:
    return int(_U32.unpack_from(payload)[0])


def text(payload: bytes) -> str:
    return payload.split(b"\0", 1)[0].decode(errors="replace")


def ip_text(family: int, payload: bytes) -> str:
    return socket.inet_ntop(family, payload)


def hex_address(payload: bytes) -> str:
    return ":".join(f"{b:02x}" for b in payload)


# ---------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class Message:
    """One message the kernel sent: type, header flags, body (after the header)."""

    type: int
    flags: int
    body: bytes


def pack(msg_type: int, flags: int, seq: int, body: bytes) -> bytes:
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), msg_type, flags, seq, 0) + body


def split(datagram: bytes) -> Iterator[tuple[int, Message]]:
    """(sequence number, message) of each message in one datagram."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(datagram):
        length, kind, flags, seq, _pid = _NLMSGHDR.unpack_from(datagram, offset)
        if length < _NLMSGHDR.size or offset + length > len(datagram):
            raise NetlinkErrno(errno.EBADMSG)
        body = datagram[offset + _NLMSGHDR.size : offset + length]
        yield seq, Message(kind, flags, body)
        offset += (length + 3) & ~3


def error_of(msg: Message) -> NetlinkErrno | None:
    """The refusal an NLMSG_ERROR carries; None for an ACK (error 0)."""
    code = -_I32.unpack_from(msg.body)[0]
    if code == 0:
        return None
    said = ""
    if msg.flags & NLM_F_ACK_TLVS:
        # struct nlmsgerr is the error and the request's header (and, without
        # NLM_F_CAPPED, the whole request); the extended-ack attributes follow.
        skip = 4 + (
            _NLMSGHDR.size
            if msg.flags & NLM_F_CAPPED
            else _NLMSGHDR.unpack_from(msg.body, 4)[0]
        )
        found = attrs(msg.body, skip).get(NLMSGERR_ATTR_MSG)
        if found is not None:
            said = text(found)
    return NetlinkErrno(code, said)


def open_socket() -> socket.socket:
    """A bound NETLINK_ROUTE socket in the calling thread's netns."""
    sock = socket.socket(
        socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE
    )
    try:
        # The kernel's reason in errors, without the request echoed back.
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        sock.bind((0, 0))
    except OSError:
        sock.close()
        raise
    return sock


class RtnlSocket:
    """One NETLINK_ROUTE socket, in the netns of the thread that opened it.

    ``request`` sends one message and reads its answers in order, synchronously:
    the plugins never have two requests in flight, so no event loop is needed.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._seq = 0

    @classmethod
    def open(cls) -> RtnlSocket:
        return cls(open_socket())

    def request(self, msg_type: int, flags: int, body: bytes) -> list[Message]:
        """The kernel's answers to one request (without the final ACK or DONE).

        Raises ``NetlinkErrno`` for a refusal and ``DumpInterrupted`` for a dump
        whose table changed while it was read.
        """
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        seq = self._seq
        self._sock.send(pack(msg_type, flags, seq, body))
        dump = flags & NLM_F_DUMP == NLM_F_DUMP
        out: list[Message] = []
        interrupted = False
        while True:
            datagram, _, msg_flags, _ = self._sock.recvmsg(RECV_SIZE)
            if msg_flags & socket.MSG_TRUNC:
                raise NetlinkErrno(errno.EMSGSIZE)
            for got_seq, msg in split(datagram):
                if got_seq != seq:
                    continue  # an answer to an earlier request, abandoned
                if msg.type == NLMSG_ERROR:
                    err = error_of(msg)
                    if err is not None:
                        raise err
                    return out
                if msg.type == NLMSG_DONE:
                    status = _I32.unpack_from(msg.body)[0] if len(msg.body) >= 4 else 0
                    if status < 0:
                        raise NetlinkErrno(-status)
                    if interrupted:
                        raise DumpInterrupted
                    return out
                interrupted = interrupted or bool(msg.flags & NLM_F_DUMP_INTR)
                out.append(msg)
                if not dump and not flags & NLM_F_ACK:
                    return out

    def close(self) -> None:
        self._sock.close()


def bodies(messages: Iterable[Message], msg_type: int) -> Iterator[bytes]:
    """The bodies of the messages of one type (a dump may carry others)."""
    return (m.body for m in messages if m.type == msg_type)
