# SPDX-License-Identifier: Apache-2.0
"""Where the RDMA exporter's numbers come from: two narrow seams and their records.

- ``RdmaStatsSource``: an RDMA device's identity (node/system image GUID) and
  its hardware counters. ``SysfsRdmaStats`` reads them from sysfs
  ``hw_counters`` (what ``rdma statistic`` shows, without its fork/exec) where
  the host's sysfs shows the device; ``cni.kernel.rdma_stats`` reads a
  pod's device in exclusive mode over nldev in the pod's netns.
- ``NetdevStatsSource``: a netdev's ethtool statistics and link speed, read in
  the netns the netdev lives in (``cni.kernel.ethtool`` on a real node).

Other hosts (a simulated one, a test) inject implementations of their own;
nothing here knows about it.

Standard library only.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

#: hw_counters entries that are settings, not counters (mlx5: the interval in
#: ms the driver caches the values for).
NOT_COUNTERS = frozenset({"lifespan"})
_TCLASS = re.compile(r"Global tclass=(\d+)")


@dataclass(frozen=True, slots=True)
class RdmaStats:
    node_guid: str
    sys_image_guid: str
    counters: dict[str, int] = field(default_factory=dict)
    tos: int | None = None  # traffic class of a root (PF) device

    @property
    def is_root(self) -> bool:
        """A PF: its node GUID is the system image GUID (Spiderpool's test)."""
        return bool(self.node_guid) and self.node_guid == self.sys_image_guid


@dataclass(frozen=True, slots=True)
class NetdevStats:
    stats: dict[str, int] = field(default_factory=dict)
    speed_mbps: int | None = None  # None: unknown (link down, no ethtool)


class RdmaStatsSource(Protocol):
    def read(
        self, pci: str, device: str, netns: str | None = None
    ) -> tuple[str, RdmaStats] | None:
        """(device name, stats) of the RDMA device of function ``pci``
        (``device`` is the name ADD recorded, a hint; ``netns`` where the
        record says it is, None: the host's); None when it has none."""
        ...


class NetdevStatsSource(Protocol):
    def read(self, netns: str | None, ifnames: Sequence[str]) -> dict[str, NetdevStats]:
        """Stats of the netdevs ``ifnames`` in ``netns`` (None: the host's);
        a netdev that cannot be read is left out."""
        ...


def _read(path: str) -> str | None:
    # os.open/os.read on str paths: a scrape reads ~30 small files per device,
    # and pathlib's per-call overhead was a third of the exporter's CPU.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode(errors="replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def _subdirs(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            return sorted(e.name for e in it if e.is_dir())
    except OSError:
        return []


class SysfsRdmaStats:
    """RDMA devices under ``<root>/bus/pci/devices/<pci>/infiniband/``.

    The same tree ``rdma statistic`` reflects (``ports/<N>/hw_counters``);
    counters of a multi-port device are summed, as Spiderpool's series carry no
    port label. sysfs shows a device only in the netns that owns it, so on a
    node in exclusive RDMA mode a pod's device is read where it is visible.
    """

    def __init__(self, root: Path | str = "/sys") -> None:
        self.root = Path(root)
        self._devices = os.path.join(str(root), "bus", "pci", "devices")

    def _device_dir(self, pci: str, hint: str) -> str | None:
        base = os.path.join(self._devices, pci, "infiniband")
        if hint and os.path.isdir(os.path.join(base, hint)):
            return os.path.join(base, hint)
        # A driver rebind may have renumbered it (mlx5_4 -> mlx5_104).
        entries = _subdirs(base)
        return os.path.join(base, entries[0]) if entries else None

    def read(
        self, pci: str, device: str, netns: str | None = None
    ) -> tuple[str, RdmaStats] | None:
        path = self._device_dir(pci, device)
        if path is None:
            return None
        counters: dict[str, int] = {}
        ports = os.path.join(path, "ports")
        for port in _subdirs(ports):
            hw = os.path.join(ports, port, "hw_counters")
            try:
                entries = os.listdir(hw)
            except OSError:
                continue
            for name in entries:
                if name in NOT_COUNTERS:
                    continue
                raw = _read(os.path.join(hw, name))
                if raw is None or not raw.isdigit():
                    continue
                counters[name] = counters.get(name, 0) + int(raw)
        node = _read(os.path.join(path, "node_guid")) or ""
        image = _read(os.path.join(path, "sys_image_guid")) or ""
        tos = None
        if node and node == image:
            # Spiderpool's tos.go: root devices only, 0 when not configured.
            text = _read(os.path.join(path, "tc", "1", "traffic_class")) or ""
            match = _TCLASS.search(text)
            tos = int(match.group(1)) if match else 0
        return os.path.basename(path), RdmaStats(node, image, counters, tos)


def parse_speed(speed: int, speed_hi: int = 0) -> int | None:
    """Mb/s from ETHTOOL_GSET's two halves; None for SPEED_UNKNOWN (-1) or 0."""
    value = (speed_hi << 16) | speed
    return None if value in (0, 0xFFFF, 0xFFFFFFFF) else value
