# SPDX-License-Identifier: Apache-2.0
"""NETLINK_RDMA (nldev) adapter: the RDMA netns mode and moving RDMA devices.

The messages (SYS_GET, GET dump, SET with NET_NS_FD) are ``cni.kernel.nldev``'s;
this module holds the conversation and the errno translation.

Namespaces: in exclusive mode the kernel only shows (and only moves) devices
of the *sender's* network namespace (``rdma_dev_change_netns`` compares the
device's netns with ``current->nsproxy->net_ns``). So an operation on a device
in the pod netns runs with the calling thread switched into that netns
(setns on the main thread of the single-threaded plugin process), and the
target namespace is passed as an fd opened beforehand.

May import: pyroute2 (netlink core only), the stdlib, ``cni.kernel``,
``cni.kernel.nldev`` and ``cni.kernel.netns`` (setns on the calling thread).
Imported lazily inside ``real_deps()``; nothing else imports it at module top.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyroute2.netlink import nlmsg
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nlsocket import NetlinkSocket

from cni.kernel import (
    DeviceBusy,
    DeviceNotFound,
    InvalidArgument,
    KernelError,
    NetnsPath,
    NotSupported,
    RdmaOps,
)
from cni.kernel.netns import OWN_NETNS, in_netns, open_netns
from cni.kernel.nldev import (
    NETLINK_RDMA,
    RdmaSocket,
    dev_dump_request,
    nldevmsg,
    parse_devices,
    parse_netns_mode,
    set_netns_request,
    sys_get_request,
)

log = logging.getLogger(__name__)

NO_RDMA_MSG = "this host has no RDMA netlink support (ib_core not loaded?)"


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
        replies = self._request(dev_dump_request(), "RDMA device dump")
        return {name: dev.index for name, dev in parse_devices(replies).items()}

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


# Conformance with the kernel seam, checked by mypy (Go's `var _ X = &Y{}`).
_conforms: type[RdmaOps] = NetlinkRdmaOps
