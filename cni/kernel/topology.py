# SPDX-License-Identifier: Apache-2.0
"""Where a PCI function sits: its way up to the root complex, its NUMA node,
and how close two functions are in the terms ``nvidia-smi topo -m`` uses.

Read from sysfs alone, under the root ``cni.kernel.sysfs.Sysfs`` names:

    <root>/bus/pci/devices/<pci> -> ../../../devices/pci0000:15/0000:15:01.0/
                                    0000:16:00.0/0000:17:00.0/<pci>
    <root>/bus/pci/devices/<pci>/{class,vendor,device,numa_node}

The link's text (never its resolved absolute path) gives the root complex
and the bridges in between, so a tree copied off a node (a support bundle)
reads the same as the node's own ``/sys``. A function that is a directory
rather than such a link (the simulated host's flat tree) has no known place:
``place`` returns an empty path and callers record nothing.

Standard library and ``cni.kernel`` only; cheap enough for a plugin's ADD.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from cni.kernel import KernelError

NVIDIA_VENDOR = 0x10DE
#: PCI base class 0x03 (display), subclasses VGA (0x00) and 3D (0x02).
GPU_CLASSES = (0x0300, 0x0302)
_DEVICES_MARK = "devices/"


class TopologyError(KernelError):
    """sysfs does not say what is needed (a missing or unreadable attribute)."""


class Affinity(IntEnum):
    """How close two PCI functions are; lower is closer (nvidia-smi's legend)."""

    PIX = 1  # at most one PCIe switch between them
    PXB = 2  # several PCIe switches, not through a root complex
    PHB = 3  # through one root complex (PCIe host bridge)
    NODE = 4  # different root complexes of one NUMA node
    SYS = 5  # across the sockets' interconnect (different NUMA nodes)

    @property
    def meaning(self) -> str:
        return _MEANING[self]


_MEANING = {
    Affinity.PIX: "same PCIe switch",
    Affinity.PXB: "multiple PCIe switches",
    Affinity.PHB: "same root complex",
    Affinity.NODE: "same NUMA node",
    Affinity.SYS: "across sockets",
}


@dataclass(frozen=True, slots=True)
class PciPlace:
    """A function's place: ``path`` is the root complex ("pci0000:15"), the
    bridges below it, then the function itself; empty when unknown."""

    pci: str
    path: tuple[str, ...]
    numa_node: int | None  # None: the kernel does not know (-1) or no attribute

    @property
    def pcie_root(self) -> str:
        return self.path[0] if self.path else ""


def affinity(a: PciPlace, b: PciPlace) -> Affinity:
    """nvidia-smi's level between two placed functions.

    Below a common bridge, each side crossing at most one more bridge (both
    on ports of one switch, or one port) is PIX; deeper is PXB; a common root
    complex only is PHB; otherwise the NUMA nodes decide (unknown on both
    sides counts as one node, as on a single-socket host).
    """
    if not a.path or not b.path:
        raise TopologyError(f"no PCIe path known for {a.pci if not a.path else b.pci}")
    if a.pcie_root != b.pcie_root:
        return Affinity.NODE if a.numa_node == b.numa_node else Affinity.SYS
    common = 0
    for x, y in zip(a.path[:-1], b.path[:-1], strict=False):
        if x != y:
            break
        common += 1
    if common <= 1:
        return Affinity.PHB
    below_a = len(a.path) - common
    below_b = len(b.path) - common
    return Affinity.PIX if max(below_a, below_b) <= 2 else Affinity.PXB


class Topology:
    """Read-only PCI topology under ``devices_dir`` (``Sysfs.devices_dir``)."""

    def __init__(self, devices_dir: Path) -> None:
        self.devices_dir = Path(devices_dir)

    def functions(self) -> list[str]:
        try:
            return sorted(p.name for p in self.devices_dir.iterdir())
        except FileNotFoundError as exc:
            raise TopologyError(f"no PCI devices under {self.devices_dir}") from exc

    def attr(self, pci: str, name: str) -> str:
        path = self.devices_dir / pci / name
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise TopologyError(
                f"{pci}: cannot read {name} ({path}: {exc.strerror or exc})"
            ) from exc

    def hex_attr(self, pci: str, name: str) -> int:
        raw = self.attr(pci, name)
        try:
            return int(raw, 16)
        except ValueError:
            raise TopologyError(f"{pci}: {name} is {raw!r}, not a hex number") from None

    def numa_node(self, pci: str) -> int | None:
        raw = self.attr(pci, "numa_node")
        try:
            node = int(raw)
        except ValueError:
            raise TopologyError(f"{pci}: numa_node is {raw!r}, not a number") from None
        return node if node >= 0 else None

    def path(self, pci: str) -> tuple[str, ...]:
        """Root complex, bridges, function, from the bus entry's link text."""
        try:
            target = os.readlink(self.devices_dir / pci)
        except OSError:
            return ()
        if _DEVICES_MARK not in target:
            return ()
        parts = target[target.index(_DEVICES_MARK) + len(_DEVICES_MARK) :].split("/")
        return tuple(p for p in parts if p)

    def place(self, pci: str) -> PciPlace:
        return PciPlace(pci, self.path(pci), self.numa_node(pci))

    def is_gpu(self, pci: str) -> bool:
        return (
            self.hex_attr(pci, "vendor") == NVIDIA_VENDOR
            and self.hex_attr(pci, "class") >> 8 in GPU_CLASSES
        )


def place_or_none(devices_dir: Path, pci: str) -> PciPlace | None:
    """The function's place for a record; None when sysfs shows none (a
    flat tree, no ``numa_node``): the record then keeps no topology."""
    topo = Topology(devices_dir)
    try:
        found = topo.place(pci)
    except TopologyError:
        return None
    return found if found.path else None
