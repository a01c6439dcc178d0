# SPDX-License-Identifier: Apache-2.0
"""``railyard rails``: which NIC serves which GPU on this node, from sysfs alone.

Discovery (``discover``) lists the GPUs (NVIDIA VGA or 3D controllers) and the
RDMA-capable PFs (a function with an ``infiniband/`` device and no
``physfn``), each with its place in the PCIe tree (``cni.kernel.topology``).

Pairing (``pair``), the documented rule:

1. GPUs are taken in PCI address order; GPU *i* (0-based, the order
   ``nvidia-smi`` and ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` use) is rail *i+1*
   (the guide's ``gpu<i+1>sriov``, the pod's ``net<i+1>``).
2. A GPU gets the closest PF by affinity (PIX < PXB < PHB < NODE); among
   equally close PFs, the one the fewest earlier GPUs took, then the lowest
   PCI address.
   So on a switch holding two GPUs and two NICs, the first GPU gets the
   first NIC and the second GPU the second, on every node of that model.
3. A PF across the sockets (SYS) is never paired: such a GPU has no rail,
   and is said so. A closer PF that another GPU already has is preferred
   to a farther free one: those GPUs share it, and that is said too.

Standard library, PyYAML-free; reads sysfs through ``cni.kernel.topology``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cni.kernel.topology import Affinity, PciPlace, Topology, TopologyError, affinity


class RailsError(ValueError):
    """sysfs does not show what ``railyard rails`` needs; the message says what."""


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    place: PciPlace

    @property
    def pci(self) -> str:
        return self.place.pci


@dataclass(frozen=True, slots=True)
class Nic:
    """An RDMA-capable PF."""

    place: PciPlace
    rdma_device: str
    netdev: str  # "" when the PF shows none
    link_type: str  # "eth" (RoCE) or "ib", sriov-network-operator's words
    vendor: str  # "15b3", as nicSelector writes it
    device: str  # "101d"
    total_vfs: int  # 0: no SR-IOV
    num_vfs: int

    @property
    def pci(self) -> str:
        return self.place.pci


@dataclass(frozen=True, slots=True)
class Rail:
    number: int
    gpu: Gpu
    nic: Nic
    affinity: Affinity


@dataclass(frozen=True, slots=True)
class Host:
    gpus: tuple[Gpu, ...]
    nics: tuple[Nic, ...]

    def affinity(self, gpu: Gpu, nic: Nic) -> Affinity:
        return affinity(gpu.place, nic.place)


@dataclass(slots=True)
class Pairing:
    host: Host
    rails: list[Rail] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def rails_of(self, nic: Nic) -> list[Rail]:
        return [r for r in self.rails if r.nic.pci == nic.pci]


_LINK_TYPES = {"Ethernet": "eth", "InfiniBand": "ib"}


def _nic(topo: Topology, pci: str, rdma: list[str]) -> Nic:
    dev = rdma[0]
    ports = topo.devices_dir / pci / "infiniband" / dev / "ports"
    layer_file = ports / "1" / "link_layer"
    try:
        layer = layer_file.read_text().strip()
    except OSError:
        raise RailsError(
            f"{pci}: RDMA device {dev} has no port 1 link_layer ({layer_file})"
        ) from None
    if layer not in _LINK_TYPES:
        raise RailsError(f"{pci}: RDMA device {dev} has link_layer {layer!r}")
    total = num = 0
    if (topo.devices_dir / pci / "sriov_totalvfs").exists():
        total = int(topo.attr(pci, "sriov_totalvfs") or "0")
        num = int(topo.attr(pci, "sriov_numvfs") or "0")
    net = topo.devices_dir / pci / "net"
    netdevs = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
    return Nic(
        place=_placed(topo, pci),
        rdma_device=dev,
        netdev=netdevs[0] if netdevs else "",
        link_type=_LINK_TYPES[layer],
        vendor=f"{topo.hex_attr(pci, 'vendor'):04x}",
        device=f"{topo.hex_attr(pci, 'device'):04x}",
        total_vfs=total,
        num_vfs=num,
    )


def _placed(topo: Topology, pci: str) -> PciPlace:
    place = topo.place(pci)
    if not place.path:
        raise RailsError(
            f"{pci}: {topo.devices_dir / pci} is not a link into devices/, so its "
            "place in the PCIe tree is unknown (copy sysfs with its links: "
            "cp -a or tar)"
        )
    return place


def discover(sysfs_root: Path) -> Host:
    """The GPUs and RDMA PFs under ``sysfs_root``; RailsError when there are
    no GPUs or an attribute the pairing needs is missing."""
    topo = Topology(sysfs_root / "bus" / "pci" / "devices")
    gpus: list[Gpu] = []
    nics: list[Nic] = []
    try:
        for pci in topo.functions():
            base = topo.devices_dir / pci
            if (base / "physfn").is_symlink():
                continue  # a VF: rails are built on PFs
            if topo.is_gpu(pci):
                gpus.append(Gpu(len(gpus), _placed(topo, pci)))
                continue
            rdma = sorted(p.name for p in (base / "infiniband").glob("*"))
            if rdma:
                nics.append(_nic(topo, pci, rdma))
    except (TopologyError, ValueError) as exc:
        raise RailsError(str(exc)) from exc
    if not gpus:
        raise RailsError(
            f"no GPU under {topo.devices_dir} (no NVIDIA VGA/3D controller): "
            "nothing to pair"
        )
    return Host(tuple(gpus), tuple(nics))


def pair(host: Host) -> Pairing:
    """Each GPU's rail by the module's rule; notes for what does not fit."""
    out = Pairing(host)
    taken: dict[str, list[int]] = {}
    if not host.nics:
        out.notes.append("no RDMA-capable NIC: no GPU has a rail")
        return out
    for gpu in host.gpus:
        ranked = sorted(
            host.nics,
            key=lambda n: (host.affinity(gpu, n), len(taken.get(n.pci, ())), n.pci),
        )
        best = ranked[0]
        level = host.affinity(gpu, best)
        if level is Affinity.SYS:
            out.notes.append(
                f"GPU {gpu.index} ({gpu.pci}) has no NIC on its socket (closest: "
                f"{best.rdma_device} {best.pci}, SYS): no rail"
            )
            continue
        taken.setdefault(best.pci, []).append(gpu.index)
        out.rails.append(Rail(gpu.index + 1, gpu, best, level))
    for nic in host.nics:
        users = taken.get(nic.pci, [])
        if len(users) > 1:
            listed = ", ".join(f"GPU {i}" for i in users[:-1]) + f" and GPU {users[-1]}"
            out.notes.append(
                f"{listed} share NIC {nic.rdma_device} ({nic.pci}) and its bandwidth"
            )
        elif not users:
            out.notes.append(f"NIC {nic.rdma_device} ({nic.pci}) serves no GPU")
    for rail in out.rails:
        if rail.nic.total_vfs == 0:
            out.notes.append(
                f"NIC {rail.nic.rdma_device} ({rail.nic.pci}) has no SR-IOV "
                f"(no sriov_totalvfs): rail {rail.number} cannot get VFs"
            )
    return out
