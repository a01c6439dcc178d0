# SPDX-License-Identifier: Apache-2.0
"""NETLINK_RDMA (nldev) adapter: the RDMA netns mode and moving RDMA devices.

pyroute2 0.9 has no NETLINK_RDMA support, so the three nldev messages the
plugins need are defined here on pyroute2's netlink core (``nlmsg`` for the
encoding, ``Marshal`` + ``NetlinkSocket`` for the conversation). Every number
below comes from the kernel uapi headers: ``linux/netlink.h`` (NETLINK_RDMA)
and ``rdma/rdma_netlink.h`` (RDMA_NL_NLDEV, RDMA_NLDEV_CMD_*, RDMA_NLDEV_ATTR_*).

nldev messages carry no family header (no genlmsghdr): the attributes follow
the ``nlmsghdr`` directly, and the message type is ``RDMA_NL_GET_TYPE(client,
op) = (client << 10) + op``.

Namespaces: in exclusive mode the kernel only shows (and only moves) devices
of the *sender's* network namespace (``rdma_dev_change_netns`` compares the
device's netns with ``current->nsproxy->net_ns``). So an operation on a device
in the pod netns runs with the calling thread switched into that netns
(setns on the main thread of the single-threaded plugin process), and the
target namespace is passed as an fd opened beforehand.

May import: pyroute2 (netlink core only), the stdlib, ``cni.kernel`` and
``cni.kernel.netns`` (setns on the calling thread).
Imported lazily inside ``real_deps()``; nothing else imports it at module top.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyroute2.netlink import NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, nlmsg
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nlsocket import AsyncNetlinkSocket, Marshal, NetlinkSocket

from cni.kernel import (
    DeviceBusy,
    DeviceNotFound,
    InvalidArgument,
    KernelError,
    LinkExists,
    NetnsPath,
    NotSupported,
    RdmaOps,
)
from cni.kernel.netns import OWN_NETNS, in_netns, open_netns

log = logging.getLogger(__name__)

# linux/netlink.h
NETLINK_RDMA = 20
# rdma/rdma_netlink.h: enum { RDMA_NL_IWCM = 2, RDMA_NL_RSVD, RDMA_NL_LS,
# RDMA_NL_NLDEV, ... }
RDMA_NL_NLDEV = 5
# enum rdma_nldev_command
RDMA_NLDEV_CMD_GET = 1
RDMA_NLDEV_CMD_SET = 2
RDMA_NLDEV_CMD_SYS_GET = 6
# enum rdma_nldev_attr
RDMA_NLDEV_ATTR_DEV_INDEX = 1  # u32
RDMA_NLDEV_ATTR_DEV_NAME = 2  # string
RDMA_NLDEV_SYS_ATTR_NETNS_MODE = 66  # u8: 1 = shared, 0 = exclusive
RDMA_NLDEV_NET_NS_FD = 68  # u32

NO_RDMA_MSG = "this host has no RDMA netlink support (ib_core not loaded?)"


def nldev_type(op: int) -> int:
    """RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op) from rdma_netlink.h."""
    return (RDMA_NL_NLDEV << 10) + op


NLDEV_GET = nldev_type(RDMA_NLDEV_CMD_GET)  # 0x1401
NLDEV_SET = nldev_type(RDMA_NLDEV_CMD_SET)  # 0x1402
NLDEV_SYS_GET = nldev_type(RDMA_NLDEV_CMD_SYS_GET)  # 0x1406


class nldevmsg(nlmsg):  # noqa: N801 - pyroute2 names message classes in lower case
    """An nldev request or reply: nlmsghdr followed by attributes only."""

    fields = ()
    nla_map = (
        (RDMA_NLDEV_ATTR_DEV_INDEX, "RDMA_NLDEV_ATTR_DEV_INDEX", "uint32"),
        (RDMA_NLDEV_ATTR_DEV_NAME, "RDMA_NLDEV_ATTR_DEV_NAME", "asciiz"),
        (RDMA_NLDEV_SYS_ATTR_NETNS_MODE, "RDMA_NLDEV_SYS_ATTR_NETNS_MODE", "uint8"),
        (RDMA_NLDEV_NET_NS_FD, "RDMA_NLDEV_NET_NS_FD", "uint32"),
    )


class MarshalNldev(Marshal):
    msg_map = {NLDEV_GET: nldevmsg, NLDEV_SET: nldevmsg, NLDEV_SYS_GET: nldevmsg}


class AsyncRdmaSocket(AsyncNetlinkSocket):
    marshal_class = MarshalNldev


class RdmaSocket(NetlinkSocket):
    """A NETLINK_RDMA socket in the namespace of the thread that opens it."""

    async_class = AsyncRdmaSocket


# ------------------------------------------------------------ message builders


def sys_get_request() -> nldevmsg:
    """RDMA_NLDEV_CMD_SYS_GET: no attributes; the reply carries NETNS_MODE."""
    msg = nldevmsg()
    msg["header"]["type"] = NLDEV_SYS_GET
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    return msg


def dev_dump_request() -> nldevmsg:
    """RDMA_NLDEV_CMD_GET with NLM_F_DUMP: one reply per visible device."""
    msg = nldevmsg()
    msg["header"]["type"] = NLDEV_GET
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
    return msg


def set_netns_request(index: int, ns_fd: int) -> nldevmsg:
    """RDMA_NLDEV_CMD_SET with DEV_INDEX and NET_NS_FD: move a device."""
    msg = nldevmsg()
    msg["header"]["type"] = NLDEV_SET
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    msg["attrs"] = [
        ("RDMA_NLDEV_ATTR_DEV_INDEX", index),
        ("RDMA_NLDEV_NET_NS_FD", ns_fd),
    ]
    return msg


def set_name_request(index: int, name: str) -> nldevmsg:
    """RDMA_NLDEV_CMD_SET with DEV_INDEX and DEV_NAME: rename a device.

    The kernel (nldev_set_doit) takes the name as a NUL-terminated string of
    at most IB_DEVICE_NAME_MAX bytes with the NUL; ``cni.kernel.rdma_rules``
    checks it before anything is sent.
    """
    msg = nldevmsg()
    msg["header"]["type"] = NLDEV_SET
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    msg["attrs"] = [
        ("RDMA_NLDEV_ATTR_DEV_INDEX", index),
        ("RDMA_NLDEV_ATTR_DEV_NAME", name),
    ]
    return msg


def parse_netns_mode(reply: nlmsg) -> str:
    """ "shared" or "exclusive" from a SYS_GET reply (the u8 is 1 for shared)."""
    value = reply.get_attr("RDMA_NLDEV_SYS_ATTR_NETNS_MODE")
    if value is None:
        raise NotSupported(
            "the kernel does not report the RDMA netns mode (RDMA_NLDEV_SYS_ATTR_"
            "NETNS_MODE missing; kernel older than 5.3?)"
        )
    return "shared" if value else "exclusive"


def parse_devices(replies: list[nlmsg]) -> dict[str, int]:
    """Device name -> index from the replies of a device dump."""
    out: dict[str, int] = {}
    for reply in replies:
        name = reply.get_attr("RDMA_NLDEV_ATTR_DEV_NAME")
        index = reply.get_attr("RDMA_NLDEV_ATTR_DEV_INDEX")
        if name is not None and index is not None:
            out[name] = index
    return out


# --------------------------------------------------------------------- adapter


def _translate(exc: NetlinkError, what: str) -> KernelError:
    code = exc.code
    detail = f"{what}: {os.strerror(code)} (errno {code})"
    if code in (errno.EOPNOTSUPP, errno.EPROTONOSUPPORT):
        return NotSupported(detail, code)
    if code in (errno.ENODEV, errno.ENOENT):
        return DeviceNotFound(detail, code)
    if code == errno.EBUSY:
        return DeviceBusy(detail, code)
    if code == errno.EEXIST:
        return LinkExists(detail, code)
    if code in (errno.EINVAL, errno.ERANGE):
        return InvalidArgument(detail, code)
    return KernelError(detail, code)


@contextmanager
def _inside(netns: NetnsPath) -> Iterator[None]:
    """Run the block with the calling thread in ``netns`` (None: stay here)."""
    if netns is None:
        yield
        return
    with in_netns(netns):
        yield


SocketFactory = Callable[[], NetlinkSocket]


class NetlinkRdmaOps:
    """``RdmaOps`` over NETLINK_RDMA; one socket per operation, always closed.

    ``socket_factory`` builds the socket (default: a NETLINK_RDMA socket in the
    current thread's netns); tests hand in a socket whose peer plays the kernel.
    """

    def __init__(self, socket_factory: SocketFactory | None = None) -> None:
        self._factory = socket_factory or self._kernel_socket

    @staticmethod
    def _kernel_socket() -> NetlinkSocket:
        try:
            sock = RdmaSocket(family=NETLINK_RDMA, flags=0)
        except OSError as exc:
            if exc.errno in (errno.EPROTONOSUPPORT, errno.EAFNOSUPPORT):
                raise NotSupported(NO_RDMA_MSG, exc.errno) from exc
            raise KernelError(
                f"cannot open a NETLINK_RDMA socket: {exc}", exc.errno
            ) from exc
        return sock

    def _request(self, msg: nldevmsg, what: str) -> list[nlmsg]:
        sock = self._factory()
        try:
            return list(
                sock.nlm_request(msg, msg["header"]["type"], msg["header"]["flags"])
            )
        except NetlinkError as exc:
            raise _translate(exc, what) from exc
        finally:
            sock.close()

    def netns_mode(self) -> str:
        replies = self._request(sys_get_request(), "RDMA system get")
        if not replies:
            raise NotSupported(NO_RDMA_MSG)
        return parse_netns_mode(replies[0])

    def _index_table(self) -> dict[str, int]:
        return parse_devices(self._request(dev_dump_request(), "RDMA device dump"))

    def devices(self, netns: NetnsPath = None) -> list[str]:
        with _inside(netns):
            return sorted(self._index_table())

    def move(self, dev: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        # Open the target first, from where we are: None means this process's
        # own netns, which is no longer reachable by path once inside ``netns``.
        target = open_netns(to_netns or OWN_NETNS)
        try:
            with _inside(netns):
                index = self._index_table().get(dev)
                if index is None:
                    where = netns or "the host netns"
                    raise DeviceNotFound(f"RDMA device {dev} not found in {where}")
                log.debug(
                    "moving RDMA device %s (index %d) to %s",
                    dev,
                    index,
                    to_netns or "the host netns",
                )
                self._request(
                    set_netns_request(index, target),
                    f"moving RDMA device {dev} to {to_netns or 'the host netns'}",
                )
        finally:
            os.close(target)

    def rename(self, dev: str, new_name: str, netns: NetnsPath = None) -> None:
        # By index, from inside the netns that sees the device (exclusive mode).
        with _inside(netns):
            index = self._index_table().get(dev)
            if index is None:
                where = netns or "the host netns"
                raise DeviceNotFound(f"RDMA device {dev} not found in {where}")
            log.debug("renaming RDMA device %s (index %d) to %s", dev, index, new_name)
            self._request(
                set_name_request(index, new_name),
                f"renaming RDMA device {dev} to {new_name}",
            )


# Conformance with the kernel seam, checked by mypy (Go's `var _ X = &Y{}`).
_conforms: type[RdmaOps] = NetlinkRdmaOps
