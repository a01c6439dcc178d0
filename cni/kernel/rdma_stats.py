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

The messages are ``cni.kernel.nldev``'s (shared with the plugins' adapter).

May import: pyroute2's netlink core, ``cni.kernel``, its netns helpers,
``cni.kernel.nldev`` and the exporter's records (``cni.kernel.stats``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager

from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nlsocket import NetlinkSocket

from cni.kernel import KernelError
from cni.kernel.netns import in_netns
from cni.kernel.nldev import (
    NETLINK_RDMA,
    NLDEV_GET,
    NLDEV_STAT_GET,
    RdmaSocket,
    dev_dump_request,
    parse_devices,
    parse_hwcounters,
    stat_get_request,
)
from cni.kernel.stats import RdmaStats, RdmaStatsSource

log = logging.getLogger(__name__)


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
            lambda: RdmaSocket(family=NETLINK_RDMA, flags=0)
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
            found_dev = devices[device]
            replies = list(
                sock.nlm_request(
                    stat_get_request(found_dev.index), NLDEV_STAT_GET, NLM_F_REQUEST
                )
            )
        except NetlinkError as exc:
            log.debug("RDMA statistics of %s in %s: %s", device, netns, exc)
            return None
        finally:
            sock.close()
        counters = parse_hwcounters(replies[0]) if replies else {}
        return device, RdmaStats(
            found_dev.node_guid, found_dev.sys_image_guid, counters, None
        )
