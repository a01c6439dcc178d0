# SPDX-License-Identifier: Apache-2.0
"""A scripted NETLINK_RDMA "kernel" for NetlinkRdmaOps tests.

The socket handed to pyroute2 is one end of an in-process AF_UNIX datagram
pair; a thread on the other end answers each request the way
drivers/infiniband/core/nldev.c does, with replies built from the uapi numbers
(rdma/rdma_netlink.h, see test_rdma_nldev_messages.py). It records the raw
requests, the netns the adapter was in when it opened each socket, and what
the NET_NS_FD of a move pointed at (the fd is valid in this process).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
from collections.abc import Callable

from cni.kernel.nldev import NETLINK_RDMA, RdmaSocket

NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_MULTI = 0x2
NLM_F_CAPPED = 0x100


def nla_u32(atype: int, value: int) -> bytes:
    return struct.pack("=HHI", 8, atype, value)


def nla_u8(atype: int, value: int) -> bytes:
    return struct.pack("=HHB", 5, atype, value) + b"\0" * 3


def nla_str(atype: int, value: str) -> bytes:
    raw = value.encode() + b"\0"
    return struct.pack("=HH", 4 + len(raw), atype) + raw + b"\0" * (-len(raw) % 4)


def msg(mtype: int, flags: int, seq: int, pid: int, body: bytes = b"") -> bytes:
    return struct.pack("=IHHII", 16 + len(body), mtype, flags, seq, pid) + body


class FakeKernel:
    """Answers nldev requests; records every request it saw."""

    def __init__(self, mode: int, devices: dict[str, int], set_errno: int = 0):
        self.mode = mode
        self.devices = devices
        self.set_errno = set_errno
        self.requests: list[bytes] = []
        #: The calling thread's netns (readlink of /proc/thread-self/ns/net)
        #: each time the adapter opened a socket.
        self.opened_in: list[str] = []
        #: What the NET_NS_FD of each SET request pointed at when it arrived.
        self.ns_fd_targets: list[str] = []

    def serve(self, end: socket.socket) -> None:
        with end:
            data = end.recv(65535)
            if not data:
                return
            self.requests.append(data)
            _, mtype, _, seq, pid = struct.unpack_from("=IHHII", data)
            if mtype == 0x1406:
                end.send(msg(mtype, 0, seq, pid, nla_u8(66, self.mode)))
                # The trailing ack of NLM_F_ACK: the adapter may have closed
                # its end already (the kernel would just drop it).
                with contextlib.suppress(OSError):
                    end.send(self.ack(data, seq, pid, 0))
            elif mtype == 0x1401:
                out = b"".join(
                    msg(mtype, NLM_F_MULTI, seq, pid, nla_u32(1, i) + nla_str(2, n))
                    for n, i in self.devices.items()
                )
                end.send(out + msg(NLMSG_DONE, NLM_F_MULTI, seq, pid, b"\0" * 4))
            elif mtype == 0x1402:
                # DEV_INDEX u32 at 16, then NET_NS_FD u32 (type 68) at 24.
                fd = struct.unpack_from("=I", data, 28)[0]
                inode = os.stat(f"/proc/self/fd/{fd}").st_ino  # the nsfs inode
                self.ns_fd_targets.append(f"net:[{inode}]")
                end.send(self.ack(data, seq, pid, self.set_errno))

    @staticmethod
    def ack(request: bytes, seq: int, pid: int, err: int) -> bytes:
        # Success acks carry the request header only (NLM_F_CAPPED); errors
        # carry the whole request, as the kernel does without NETLINK_CAP_ACK.
        if err == 0:
            payload = struct.pack("=i", 0) + request[:16]
            return msg(NLMSG_ERROR, NLM_F_CAPPED, seq, pid, payload)
        return msg(NLMSG_ERROR, 0, seq, pid, struct.pack("=i", -err) + request)

    def factory(self) -> Callable[[], RdmaSocket]:
        def make() -> RdmaSocket:
            self.opened_in.append(os.readlink("/proc/thread-self/ns/net"))
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            threading.Thread(target=self.serve, args=(theirs,), daemon=True).start()
            return RdmaSocket(family=NETLINK_RDMA, use_socket=ours)

        return make
