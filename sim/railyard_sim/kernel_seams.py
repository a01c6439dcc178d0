# SPDX-License-Identifier: Apache-2.0
"""A lab variant where the kernel answers for the PFs' VF tables and RDMA.

On a kernel with netdevsim (Debian's, with the module the real-kernel tier
builds: tests/realkernel), ``Lab.up(kernel_seams={"vf"})`` makes each rail's
PF a netdevsim device renamed to the rail's PF name, with one real VF-table
entry per lab VF, and the plugins get the production ``NetlinkVfOps``: every
PF-side VF setting is the kernel's work, validated and stored by it.
``{"rdma"}`` gives them the production ``NetlinkRdmaOps`` too: the lab's RDMA
device names must then be real devices (the tier makes rxe devices under
those names).

What stays simulated in this variant: the VF netdevs (veth stand-ins, as
netdevsim has no VF netdevs), the VF PCI functions (the fake sysfs tree), and
so the driver rebind (the recording seam's, on the stand-ins).

Imports: standard library, ``cni.kernel`` and its VF adapter; the recording
seam and the RDMA adapter when used.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from cni.kernel import VfInfo
from cni.kernel.sysfs import Sysfs
from cni.kernel.vf import NetlinkVfOps

SEAMS_FILE = "kernel-seams.json"
NSIM_BUS = Path("/sys/bus/netdevsim")
NSIM_DEBUGFS = Path("/sys/kernel/debug/netdevsim")
#: netdevsim's VF ceiling until debugfs raises it.
NSIM_DEFAULT_MAX_VFS = 4
SEAMS = frozenset({"vf", "rdma"})


class KernelSeamError(RuntimeError):
    """The kernel cannot hold this lab variant (no netdevsim, ...)."""


def enabled(lab_dir: Path | str) -> dict[str, object]:
    """The lab's kernel seams: ``{"vf": {pf: nsim id}, "rdma": True}`` or {}."""
    try:
        return dict(json.loads((Path(lab_dir) / SEAMS_FILE).read_text()))
    except FileNotFoundError:
        return {}


def write(lab_dir: Path | str, seams: dict[str, object]) -> None:
    (Path(lab_dir) / SEAMS_FILE).write_text(json.dumps(seams, sort_keys=True) + "\n")


def remove_file(lab_dir: Path | str) -> None:
    (Path(lab_dir) / SEAMS_FILE).unlink(missing_ok=True)


# ------------------------------------------------------------- netdevsim PFs


def add_netdevsim_pf(numvfs: int) -> tuple[int, str]:
    """A new netdevsim device with ``numvfs`` VFs: (its id, its netdev)."""
    if not NSIM_BUS.exists():
        raise KernelSeamError("no netdevsim on this kernel (load the module first)")
    taken = {
        int(p.name.removeprefix("netdevsim")) for p in (NSIM_BUS / "devices").iterdir()
    }
    nsim_id = max(taken, default=0) + 1
    (NSIM_BUS / "new_device").write_text(f"{nsim_id} 1\n")
    dev = NSIM_BUS / "devices" / f"netdevsim{nsim_id}"
    deadline = time.monotonic() + 10
    while not (netdevs := sorted(p.name for p in (dev / "net").glob("*"))):
        if time.monotonic() > deadline:
            remove_netdevsim_pf(nsim_id)
            raise KernelSeamError(f"netdevsim{nsim_id} made no netdev within 10 s")
        time.sleep(0.05)
    if numvfs > NSIM_DEFAULT_MAX_VFS:
        (NSIM_DEBUGFS / f"netdevsim{nsim_id}" / "max_vfs").write_text(f"{numvfs}\n")
    (dev / "sriov_numvfs").write_text(f"{numvfs}\n")
    return nsim_id, netdevs[0]


def remove_netdevsim_pf(nsim_id: int) -> None:
    """Delete the device (its netdev and VF table with it); gone already is fine."""
    if (NSIM_BUS / "devices" / f"netdevsim{nsim_id}").exists():
        (NSIM_BUS / "del_device").write_text(f"{nsim_id}\n")


# --------------------------------------------------------------------- seams


class LabKernelVfOps(NetlinkVfOps):
    """The production VF adapter; only the rebind stays the lab's, whose VF
    PCI functions and netdevs are stand-ins the kernel knows nothing of."""

    def __init__(self, lab_dir: Path, sysfs: Sysfs) -> None:
        super().__init__(sysfs)
        self.lab_dir = lab_dir

    def rebind(self, pci: str) -> None:
        from railyard_sim.recording import RecordingVfOps

        RecordingVfOps(self.lab_dir).rebind(pci)


def vf_table(lab_dir: Path | str, pf: str, count: int) -> dict[int, VfInfo]:
    """The PF's VF table from whoever keeps it: the kernel or the recording."""
    if "vf" in enabled(lab_dir):
        ops = NetlinkVfOps(Sysfs())
        return {vf: ops.get_vf(pf, vf) for vf in range(count)}
    from railyard_sim import recording

    return recording.vf_table(lab_dir, pf)


def rdma_location(lab_dir: Path | str, dev: str) -> str | None:
    """None when the RDMA device is in the host netns; else where it is
    (the kernel says only "not here": exclusive mode hides it elsewhere)."""
    if enabled(lab_dir).get("rdma"):
        from cni.kernel.rdma import NetlinkRdmaOps

        return None if dev in NetlinkRdmaOps().devices() else "another netns"
    from railyard_sim import recording

    return recording.rdma_location(lab_dir, dev)
