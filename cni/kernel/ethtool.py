# SPDX-License-Identifier: Apache-2.0
"""ethtool statistics and link speed over the SIOCETHTOOL ioctl, in any netns.

pyroute2's ``IoctlEthtool`` does the ioctl encoding (ETHTOOL_GSSET_INFO,
ETHTOOL_GSTRINGS, ETHTOOL_GSTATS, ETHTOOL_GSET): no ``ethtool`` process per
scrape. An ioctl acts in the netns of the socket it is issued on, so the
socket is created with the calling thread switched into the pod's netns
(``cni.kernel.netns.in_netns``, restored before returning) and then used from
here; one socket serves every netdev of that netns and is closed at the end
of the read, so the exporter never keeps a dead pod's netns alive.

May import: pyroute2 (``pyroute2.ethtool.ioctl`` only), ``cni.kernel.netns``,
``cni.kernel.stats``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from pyroute2.ethtool.ioctl import ETH_SS_STATS, IoctlEthtool

from cni.kernel import KernelError
from cni.kernel.netns import in_netns
from cni.kernel.stats import NetdevStats, parse_speed

log = logging.getLogger(__name__)

#: Builds an unbound ethtool handle (tests pass one whose ioctls are faked).
EthtoolFactory = Callable[[], Any]


#: Statistic names kept per netdev; an mlx5 VF reports hundreds, and pyroute2
#: decodes them a character at a time (milliseconds per netdev per scrape).
NAMES_CACHE_SIZE = 4096


class EthtoolStats:
    """``NetdevStatsSource`` over the SIOCETHTOOL ioctl."""

    def __init__(self, factory: EthtoolFactory = IoctlEthtool) -> None:
        self._factory = factory
        self._names: dict[tuple[str | None, str], list[str]] = {}

    def read(self, netns: str | None, ifnames: Sequence[str]) -> dict[str, NetdevStats]:
        try:
            with in_netns(netns):
                handle = self._factory()
        except KernelError as exc:
            log.debug("netns %s unreachable: %s", netns, exc)
            return {}
        out: dict[str, NetdevStats] = {}
        try:
            for name in ifnames:
                try:
                    out[name] = read_netdev(handle, name, self._cached(netns, name))
                except Exception as exc:  # pyroute2's EthtoolError is no OSError
                    log.debug("ethtool %s in %s: %s", name, netns or "host", exc)
        finally:
            handle.close()
        return out

    def _cached(self, netns: str | None, ifname: str) -> NamesCache:
        key = (netns, ifname)
        cache = self._names

        def remember(names: list[str]) -> None:
            if len(cache) >= NAMES_CACHE_SIZE:
                cache.pop(next(iter(cache)))  # the oldest: pods come and go
            cache[key] = names

        return cache.get(key), remember


#: (the names read last time or None, a callback to remember new ones)
NamesCache = tuple[list[str] | None, Callable[[list[str]], None]]


def read_netdev(
    handle: Any, ifname: str, names: NamesCache | None = None
) -> NetdevStats:
    """Statistics and speed of ``ifname`` through one ethtool handle.

    With ``names``, the statistic names are reused while the driver reports
    as many as before (ETHTOOL_GSSET_INFO, one cheap ioctl), instead of
    fetching and decoding them again (ETHTOOL_GSTRINGS).
    """
    handle.change_ifname(ifname)
    if names is not None:
        known, remember = names
        if known is not None and handle.get_stringset_length(ETH_SS_STATS) == len(
            known
        ):
            handle.stat_names = known  # what get_statistics() would fetch
        else:
            fresh = handle.get_stringset(set_id=ETH_SS_STATS)
            remember(fresh)
            handle.stat_names = fresh
    stats = {str(k): int(v) for k, v in handle.get_statistics()}
    try:
        cmd = handle.get_cmd()
        speed = parse_speed(int(cmd.speed), int(cmd.speed_hi))
    except Exception:  # no link settings (a driver without GSET): unknown
        speed = None
    return NetdevStats(stats, speed)
