# SPDX-License-Identifier: Apache-2.0
"""Recording-seam doubles for VF and RDMA behaviour the lab's seam has no knob for.

- ``UnbindOnlyVfOps``: a rebind that unbinds the VF but never binds it again,
  so its netdev never comes back (the ib-sriov rebind timeout).
- ``RenumberingVfOps``: a driver rebind recreates the VF's RDMA device under a
  new number (``mlx5_4`` -> ``mlx5_104``), as the kernel may on real hardware.
- ``RecreatingRdmaOps``: moving an IPoIB VF's RDMA device back to the host
  recreates its netdev there under another name (the ULP netdev follows its
  RDMA device), emulated with the seam's own rebind.

``RenumberingVfOps`` renames the RDMA device with the seam's public
``railyard_sim.recording.renumber_rdma``.
"""

from __future__ import annotations

from pathlib import Path

from cni.kernel import NetnsPath
from railyard_sim.lab import run_ip
from railyard_sim.pci_tree import PciTree
from railyard_sim.recording import (
    RecordingRdmaOps,
    RecordingVfOps,
    read_state,
    renumber_rdma,
)


class UnbindOnlyVfOps(RecordingVfOps):
    """``RecordingVfOps`` whose next ``failing`` rebinds only unbind the VF."""

    def __init__(self, lab_dir: Path, failing: int = 1) -> None:
        super().__init__(lab_dir)
        self.failing = failing
        self.unbound: list[str] = []

    def rebind(self, pci: str) -> None:
        if self.failing <= 0:
            super().rebind(pci)
            return
        self.failing -= 1
        port = read_state(self.lab)["ports"][pci]
        # Deleting the fabric-side peer destroys the stand-in wherever it is.
        run_ip(
            ["link", "del", "dev", port["peer"]],
            netns=port["fabric_netns"],
            check=False,
        )
        PciTree(self.lab / "sys").remove_netdev(pci)
        self.unbound.append(pci)


class RenumberingVfOps(RecordingVfOps):
    """Each rebind brings the VF's RDMA device back as ``mlx5_<100 + n>``."""

    def __init__(self, lab_dir: Path) -> None:
        super().__init__(lab_dir)
        self.renamed: list[tuple[str, str]] = []

    def rebind(self, pci: str) -> None:
        super().rebind(pci)
        new = f"mlx5_{100 + len(self.renamed)}"
        self.renamed.append((renumber_rdma(self.lab, pci, new), new))


class RecreatingRdmaOps(RecordingRdmaOps):
    """A move to the host recreates the VF's netdev in the host, renamed."""

    def __init__(self, lab_dir: Path, pcis: dict[str, str]) -> None:
        super().__init__(lab_dir)
        self.pcis = pcis  # RDMA device -> VF PCI address
        self.recreated: list[str] = []

    def move(self, dev: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        super().move(dev, to_netns, netns)
        if to_netns is None and dev in self.pcis:
            RecordingVfOps(self.lab).rebind(self.pcis[dev])
            self.recreated.append(dev)
