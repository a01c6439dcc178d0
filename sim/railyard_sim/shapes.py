# SPDX-License-Identifier: Apache-2.0
"""Server shapes: where a real server's GPUs and NICs sit in its PCIe tree.

``railyard-sim up --shape NAME`` builds the lab's fake sysfs with one of these
topologies (root complexes, root ports, PCIe switch ports, NUMA nodes, GPUs)
and puts the lab's PFs, one rail each, where the shape's NICs are. Each shape
is written from a real machine's ``lspci -t`` layout (addresses made up):

- ``dgx``: 8 GPUs and 8 ConnectX NICs behind 4 PCIe switches on 2 sockets, as
  in DGX-class machines. Each switch hangs below a root port of its own root
  complex and holds 2 GPUs and 2 NICs on 4 downstream ports; switches 1-2 are
  on socket 0 (NUMA node 0), 3-4 on socket 1. GPU N and NIC N share a switch.
- ``split``: a 2-socket server whose 4 GPUs sit on socket 0, each on a root
  port of its own (two root complexes hold one GPU and one NIC each, two hold
  a GPU alone), while half the NICs (3 and 4) sit on socket 1.

Imports: standard library and ``railyard_sim.pci_tree`` only.
"""

from __future__ import annotations

from dataclasses import dataclass

from railyard_sim.pci_tree import PciTree


@dataclass(frozen=True, slots=True)
class Slot:
    """A GPU or NIC: its PCI address and the bridges above it, top down.

    ``path[0]`` is the root complex's ``domain:bus`` ("0000:15"), the rest are
    bridges (root port, switch upstream port, switch downstream port...), each
    ``(pci, is_switch_port)``.
    """

    pci: str
    numa_node: int
    path: tuple[tuple[str, bool], ...]
    root_complex: str


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    summary: str
    gpus: tuple[Slot, ...]
    nics: tuple[Slot, ...]  # rail N is nics[N-1]


def _switch(rc: str, numa: int, first: int) -> tuple[list[Slot], list[Slot]]:
    """A PCIe switch below root port ``<rc>:01.0`` of root complex ``rc``:
    upstream port on bus ``first``, 4 downstream ports on bus ``first+1``,
    GPU, NIC, GPU, NIC behind them (buses ``first+2`` ..)."""
    domain, bus = rc.split(":")
    root_port = (f"{rc}:01.0", False)
    upstream = (f"{domain}:{first:02x}:00.0", True)
    gpus: list[Slot] = []
    nics: list[Slot] = []
    for port in range(4):
        downstream = (f"{domain}:{first + 1:02x}:{port:02x}.0", True)
        device = f"{domain}:{first + 2 + port:02x}:00.0"
        slot = Slot(device, numa, (root_port, upstream, downstream), rc)
        (gpus if port % 2 == 0 else nics).append(slot)
    return gpus, nics


def _dgx() -> Shape:
    gpus: list[Slot] = []
    nics: list[Slot] = []
    for rc, numa, first in (
        ("0000:15", 0, 0x16),
        ("0000:36", 0, 0x37),
        ("0000:95", 1, 0x96),
        ("0000:b6", 1, 0xB7),
    ):
        g, n = _switch(rc, numa, first)
        gpus += g
        nics += n
    return Shape(
        "dgx",
        "8 GPUs and 8 NICs behind 4 PCIe switches on 2 sockets",
        tuple(gpus),
        tuple(nics),
    )


def _alone(rc: str, port: int, numa: int) -> Slot:
    """A device directly below root port ``<rc>:0<port>.0``."""
    domain, bus = rc.split(":")
    device = f"{domain}:{int(bus, 16) + port:02x}:00.0"
    return Slot(device, numa, ((f"{rc}:{port:02x}.0", False),), rc)


def _split() -> Shape:
    return Shape(
        "split",
        "2 sockets: 4 GPUs on socket 0, NICs 1-2 on socket 0, NICs 3-4 on socket 1",
        (
            _alone("0000:17", 1, 0),
            _alone("0000:3a", 1, 0),
            _alone("0000:5d", 1, 0),
            _alone("0000:85", 1, 0),
        ),
        (
            _alone("0000:17", 2, 0),
            _alone("0000:3a", 2, 0),
            _alone("0000:ae", 1, 1),
            _alone("0000:d7", 1, 1),
        ),
    )


SHAPES: dict[str, Shape] = {s.name: s for s in (_dgx(), _split())}


def shape(name: str) -> Shape:
    try:
        return SHAPES[name]
    except KeyError:
        raise ValueError(
            f"unknown server shape {name!r} (known: {', '.join(sorted(SHAPES))})"
        ) from None


def build(tree: PciTree, chosen: Shape) -> dict[str, tuple[str, int]]:
    """The shape's root complexes, bridges and GPUs in ``tree``; for each NIC,
    the ``parent`` and NUMA node its PF is to be created with."""
    placed: dict[str, tuple[str, int]] = {}
    for slot in (*chosen.gpus, *chosen.nics):
        parent = tree.host_bridge(slot.root_complex)
        for pci, is_switch in slot.path:
            if (tree.root / "devices" / parent / pci).is_dir():
                parent = f"{parent}/{pci}"
            else:
                parent = tree.bridge(parent, pci, slot.numa_node, switch=is_switch)
        placed[slot.pci] = (parent, slot.numa_node)
    for gpu in chosen.gpus:
        parent, numa = placed[gpu.pci]
        tree.gpu(parent, gpu.pci, numa)
    return {nic.pci: placed[nic.pci] for nic in chosen.nics}
