# SPDX-License-Identifier: Apache-2.0
"""Where the exporter's numbers come from: two narrow seams and their records.

- ``RdmaStatsSource``: an RDMA device's identity (node/system image GUID) and
  its hardware counters. ``SysfsRdmaStats`` reads them from sysfs
  ``hw_counters`` (what ``rdma statistic`` shows, without its fork/exec).
- ``NetdevStatsSource``: a netdev's ethtool statistics and link speed, read in
  the netns the netdev lives in (``cni.exporter.ethtool`` on a real node).

The simulated host injects its own implementations (``railyard_sim.counters``);
nothing here knows about it.

Standard library only.
"""

from __future__ import annotations

import logging
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
    def read(self, pci: str, device: str) -> tuple[str, RdmaStats] | None:
        """(device name, stats) of the RDMA device of function ``pci``
        (``device`` is the name ADD recorded, a hint); None when it has none."""
        ...


class NetdevStatsSource(Protocol):
    def read(self, netns: str | None, ifnames: Sequence[str]) -> dict[str, NetdevStats]:
        """Stats of the netdevs ``ifnames`` in ``netns`` (None: the host's);
        a netdev that cannot be read is left out."""
        ...


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


class SysfsRdmaStats:
    """RDMA devices under ``<root>/bus/pci/devices/<pci>/infiniband/``.

    The same tree ``rdma statistic`` reflects (``ports/<N>/hw_counters``);
    counters of a multi-port device are summed, as Spiderpool's series carry no
    port label. sysfs shows a device only in the netns that owns it, so on a
    node in exclusive RDMA mode a pod's device is read where it is visible.
    """

    def __init__(self, root: Path | str = "/sys") -> None:
        self.root = Path(root)

    def _device_dir(self, pci: str, hint: str) -> Path | None:
        base = self.root / "bus" / "pci" / "devices" / pci / "infiniband"
        if hint and (base / hint).is_dir():
            return base / hint
        try:
            # A driver rebind may have renumbered it (mlx5_4 -> mlx5_104).
            entries = sorted(p for p in base.iterdir() if p.is_dir())
        except OSError:
            return None
        return entries[0] if entries else None

    def read(self, pci: str, device: str) -> tuple[str, RdmaStats] | None:
        path = self._device_dir(pci, device)
        if path is None:
            return None
        counters: dict[str, int] = {}
        try:
            ports = sorted((path / "ports").iterdir())
        except OSError:
            ports = []
        for port in ports:
            try:
                entries = list((port / "hw_counters").iterdir())
            except OSError:
                continue
            for entry in entries:
                if entry.name in NOT_COUNTERS:
                    continue
                raw = _read_text(entry)
                if raw is None or not raw.isdigit():
                    continue
                counters[entry.name] = counters.get(entry.name, 0) + int(raw)
        node = _read_text(path / "node_guid") or ""
        image = _read_text(path / "sys_image_guid") or ""
        tos = None
        if node and node == image:
            # Spiderpool's tos.go: root devices only, 0 when not configured.
            text = _read_text(path / "tc" / "1" / "traffic_class") or ""
            match = _TCLASS.search(text)
            tos = int(match.group(1)) if match else 0
        return path.name, RdmaStats(node, image, counters, tos)


def parse_speed(speed: int, speed_hi: int = 0) -> int | None:
    """Mb/s from ETHTOOL_GSET's two halves; None for SPEED_UNKNOWN (-1) or 0."""
    value = (speed_hi << 16) | speed
    return None if value in (0, 0xFFFF, 0xFFFFFFFF) else value
