# SPDX-License-Identifier: Apache-2.0
"""RDMA statistics over NETLINK_RDMA (nldev), in the netns that owns the device.

What ``rdma statistic`` reads, without its process: RDMA_NLDEV_CMD_GET (dump)
names the devices of the caller's netns with their node and system image
GUIDs; RDMA_NLDEV_CMD_STAT_GET with DEV_INDEX and PORT_INDEX returns the
port's hardware counters as a nested table of (name, u64 value) entries, the
same ones sysfs ``hw_counters`` lists. In exclusive RDMA netns mode a pod's
device exists only in the pod's netns (nldev and sysfs alike), so the socket
is opened with the calling thread switched into that netns
(``cni.kernel.netns.in_netns``, restored before returning) and closed after
the read: the exporter never holds a dead pod's netns alive.

Numbers from the uapi header ``rdma/rdma_netlink.h`` (RDMA_NLDEV_CMD_GET = 1,
STAT_GET = 17; attributes DEV_INDEX = 1, DEV_NAME = 2, PORT_INDEX = 3,
NODE_GUID = 6, SYS_IMAGE_GUID = 7, STAT_HWCOUNTERS = 80, _ENTRY = 81,
_ENTRY_NAME = 82, _ENTRY_VALUE = 83); the messages are checked byte for byte
in ``tests/unit/exporter/test_exporter_rdma_netlink.py``.

May import: pyroute2's netlink core, ``cni.kernel`` and its netns helpers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST, nla, nlmsg
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nlsocket import AsyncNetlinkSocket, Marshal, NetlinkSocket

from cni.exporter.sources import RdmaStats, RdmaStatsSource
from cni.kernel import KernelError
from cni.kernel.netns import in_netns
from cni.kernel.rdma import NETLINK_RDMA, nldev_type

RDMA_NLDEV_CMD_GET = 1
RDMA_NLDEV_CMD_STAT_GET = 17
NLDEV_GET = nldev_type(RDMA_NLDEV_CMD_GET)
NLDEV_STAT_GET = nldev_type(RDMA_NLDEV_CMD_STAT_GET)
#: mlx5 RoCE/IB devices of a VF or PF port have one port, numbered 1.
PORT = 1

log = logging.getLogger(__name__)


class nldevstatmsg(nlmsg):  # noqa: N801 - pyroute2 names message classes in lower case
    """nldev GET / STAT_GET request or reply (no family header)."""

    fields = ()
    nla_map = (
        (1, "RDMA_NLDEV_ATTR_DEV_INDEX", "uint32"),
        (2, "RDMA_NLDEV_ATTR_DEV_NAME", "asciiz"),
        (3, "RDMA_NLDEV_ATTR_PORT_INDEX", "uint32"),
        (6, "RDMA_NLDEV_ATTR_NODE_GUID", "uint64"),
        (7, "RDMA_NLDEV_ATTR_SYS_IMAGE_GUID", "uint64"),
        (80, "RDMA_NLDEV_ATTR_STAT_HWCOUNTERS", "hwcounters"),
    )

    class hwcounters(nla):  # noqa: N801
        nla_map = ((81, "RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY", "entry"),)

        class entry(nla):  # noqa: N801
            nla_map = (
                (82, "RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME", "asciiz"),
                (83, "RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE", "uint64"),
            )


class MarshalNldevStat(Marshal):
    msg_map = {NLDEV_GET: nldevstatmsg, NLDEV_STAT_GET: nldevstatmsg}


class AsyncRdmaStatSocket(AsyncNetlinkSocket):
    marshal_class = MarshalNldevStat


class RdmaStatSocket(NetlinkSocket):
    async_class = AsyncRdmaStatSocket


def dev_dump_request() -> nldevstatmsg:
    msg = nldevstatmsg()
    msg["header"]["type"] = NLDEV_GET
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
    return msg


def stat_get_request(index: int, port: int = PORT) -> nldevstatmsg:
    msg = nldevstatmsg()
    msg["header"]["type"] = NLDEV_STAT_GET
    msg["header"]["flags"] = NLM_F_REQUEST
    msg["attrs"] = [
        ("RDMA_NLDEV_ATTR_DEV_INDEX", index),
        ("RDMA_NLDEV_ATTR_PORT_INDEX", port),
    ]
    return msg


def guid_text(value: int) -> str:
    """A u64 GUID as sysfs prints it: ``b83f:aa00:0001:0002``."""
    raw = f"{value:016x}"
    return ":".join(raw[i : i + 4] for i in range(0, 16, 4))


def parse_devices(replies: list[Any]) -> dict[str, tuple[int, str, str]]:
    """Device name -> (index, node GUID, system image GUID)."""
    out = {}
    for reply in replies:
        name = reply.get_attr("RDMA_NLDEV_ATTR_DEV_NAME")
        index = reply.get_attr("RDMA_NLDEV_ATTR_DEV_INDEX")
        if name is None or index is None:
            continue
        node = reply.get_attr("RDMA_NLDEV_ATTR_NODE_GUID")
        image = reply.get_attr("RDMA_NLDEV_ATTR_SYS_IMAGE_GUID")
        out[name] = (
            index,
            guid_text(node) if node is not None else "",
            guid_text(image) if image is not None else "",
        )
    return out


def parse_hwcounters(reply: Any) -> dict[str, int]:
    """Counter name -> value from a STAT_GET reply."""
    table = reply.get_attr("RDMA_NLDEV_ATTR_STAT_HWCOUNTERS")
    if table is None:
        return {}
    out = {}
    for entry in table.get_attrs("RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY"):
        name = entry.get_attr("RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME")
        value = entry.get_attr("RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE")
        if name is not None and value is not None:
            out[str(name)] = int(value)
    return out


SocketFactory = Callable[[], NetlinkSocket]


class NetlinkRdmaStats:
    """``RdmaStatsSource`` over nldev, for devices only their netns can see.

    ``fallback`` (sysfs) answers first for devices the host netns shows
    (PFs, shared mode, and the simulated host's fake tree); the netlink read
    is for a pod's device in exclusive mode, named by the record.
    """

    def __init__(
        self,
        fallback: RdmaStatsSource,
        socket_factory: SocketFactory | None = None,
        enter: Callable[[str], AbstractContextManager[None]] = in_netns,
    ) -> None:
        self.fallback = fallback
        self._enter = enter  # tests stay in their netns
        self._factory = socket_factory or (
            lambda: RdmaStatSocket(family=NETLINK_RDMA, flags=0)
        )

    def read(
        self, pci: str, device: str, netns: str | None = None
    ) -> tuple[str, RdmaStats] | None:
        found = self.fallback.read(pci, device, netns)
        if found is not None or netns is None or not device:
            return found
        try:
            with self._enter(netns):
                sock = self._factory()
        except (KernelError, OSError) as exc:
            log.debug("no RDMA netlink in %s: %s", netns, exc)
            return None
        try:
            devices = parse_devices(
                list(
                    sock.nlm_request(
                        dev_dump_request(), NLDEV_GET, NLM_F_REQUEST | NLM_F_DUMP
                    )
                )
            )
            if device not in devices:
                return None
            index, node, image = devices[device]
            replies = list(
                sock.nlm_request(stat_get_request(index), NLDEV_STAT_GET, NLM_F_REQUEST)
            )
        except NetlinkError as exc:
            log.debug("RDMA statistics of %s in %s: %s", device, netns, exc)
            return None
        finally:
            sock.close()
        counters = parse_hwcounters(replies[0]) if replies else {}
        return device, RdmaStats(node, image, counters, None)
