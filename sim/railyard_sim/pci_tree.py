# SPDX-License-Identifier: Apache-2.0
"""Declarative builder of a fake PCI sysfs tree (PFs, VFs, netdevs, RDMA devices).

Shared by unit tests and the simulated host (``railyard_sim.lab``). It writes the real
layout described in the team brief. Without a topology every function is a
directory below ``<root>/bus/pci`` so the subtree can be bind-mounted over the
host's PCI directory inside a private mount namespace (``mount_over_sys``):
every symlink is relative and stays inside the mounted subtree, and readers
must only use link *basenames*.

With a topology (``host_bridge``, ``bridge`` and a ``parent=`` for each
function, what ``railyard_sim.shapes`` builds) a function lives where the
kernel puts it, below its root complex and the bridges and switch ports on its
way there (``<root>/devices/pci0000:17/0000:17:01.0/0000:18:00.0/...``), and
``<root>/bus/pci/devices/<pci>`` is a relative link to it, as on a real host.
Such a tree is read in place (``--sysfs DIR``); it cannot be bind-mounted over
``/sys/bus/pci`` (its links leave that subtree).

Imports: standard library only (plugins load this module in simulated mode).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MELLANOX_VENDOR = "0x15b3"
PF_DEVICE_ID = "0x101d"  # ConnectX-6 Dx
VF_DEVICE_ID = "0x101e"  # ConnectX family VF
NVIDIA_VENDOR = "0x10de"
GPU_DEVICE_ID = "0x2330"  # H100 SXM5 80GB
INTEL_VENDOR = "0x8086"
ROOT_PORT_DEVICE_ID = "0x352a"  # a Xeon PCIe root port
BROADCOM_VENDOR = "0x1000"
SWITCH_DEVICE_ID = "0xc030"  # a PEX89000 switch port

# PCI class codes (class, subclass, prog-if), as sysfs ``class`` shows them.
CLASS_ETHERNET = "0x020000"
CLASS_INFINIBAND = "0x020700"
CLASS_3D_CONTROLLER = "0x030200"
CLASS_PCI_BRIDGE = "0x060400"
LINK_LAYERS = {"roce": "Ethernet", "ib": "InfiniBand"}

_MS_BIND = 4096
_MNT_DETACH = 2


class PciTree:
    """Builds ``<root>/bus/pci/{devices,drivers}`` one device at a time."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.pci_dir = self.root / "bus" / "pci"
        self.devices_dir = self.pci_dir / "devices"
        self.drivers_dir = self.pci_dir / "drivers"
        self.devices_dir.mkdir(parents=True, exist_ok=True)
        self.drivers_dir.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ builders

    def device(self, pci: str) -> Path:
        """The directory of one PCI function (it may not exist yet)."""
        return self.devices_dir / pci

    def pf(
        self,
        pci: str,
        netdev: str | None,
        numvfs: int,
        driver: str | None = "mlx5_core",
        totalvfs: int | None = None,
        parent: str | None = None,
        numa_node: int | None = None,
        pci_class: str = CLASS_ETHERNET,
    ) -> Path:
        """A physical function with SR-IOV enabled for ``numvfs`` VFs.

        ``parent`` (a path ``bridge`` returned) places it in the topology.
        """
        dev = self._function(
            pci, PF_DEVICE_ID, driver, parent, numa_node, pci_class=pci_class
        )
        (dev / "sriov_numvfs").write_text(f"{numvfs}\n")
        total = max(numvfs, totalvfs if totalvfs is not None else numvfs)
        (dev / "sriov_totalvfs").write_text(f"{total}\n")
        if netdev:
            self.set_netdev(pci, netdev)
        return dev

    def vf(
        self,
        pf_pci: str,
        index: int,
        pci: str,
        netdev: str | None,
        driver: str | None = "mlx5_core",
    ) -> Path:
        """VF number ``index`` of ``pf_pci``: ``physfn`` here, ``virtfnN`` there."""
        pf_dir = self.device(pf_pci)
        if not pf_dir.is_dir():
            raise FileNotFoundError(f"PF {pf_pci} must be added before its VFs")
        # A VF sits beside its PF (same bridge), with the PF's NUMA node.
        parent = self._parent_of(pf_pci)
        numa = (pf_dir / "numa_node").read_text().strip() if parent else None
        dev = self._function(
            pci,
            VF_DEVICE_ID,
            driver,
            parent,
            int(numa) if numa else None,
            pci_class=(pf_dir / "class").read_text().strip(),
        )
        _relink(dev / "physfn", f"../{pf_pci}")
        _relink(pf_dir / f"virtfn{index}", f"../{pci}")
        if netdev:
            self.set_netdev(pci, netdev)
        return dev

    def rdma(self, pci: str, dev: str, kind: str = "roce") -> Path:
        """An RDMA device (``mlx5_N``) of the function, under ``infiniband/``,
        with port 1's ``link_layer`` and (RoCE, as mlx5 has it) its
        ``tc/1/traffic_class``."""
        path = self.device(pci) / "infiniband" / dev
        port = path / "ports" / "1"
        port.mkdir(parents=True, exist_ok=True)
        (port / "link_layer").write_text(f"{LINK_LAYERS[kind]}\n")
        if kind == "roce":
            tc = path / "tc" / "1"
            tc.mkdir(parents=True, exist_ok=True)
            tc_file = tc / "traffic_class"
            if not tc_file.exists():
                tc_file.write_text("")
        return path

    # ------------------------------------------------------------ topology

    def host_bridge(self, domain_bus: str) -> str:
        """A root complex ``pci<domain>:<bus>`` ("pci0000:17"); its path."""
        name = f"pci{domain_bus}"
        (self.root / "devices" / name).mkdir(parents=True, exist_ok=True)
        return name

    def bridge(
        self, parent: str, pci: str, numa_node: int, switch: bool = False
    ) -> str:
        """A PCI-to-PCI bridge below ``parent``: a root port of the CPU, or
        (``switch``) a port of a PCIe switch; the path of its children."""
        vendor, device = (
            (BROADCOM_VENDOR, SWITCH_DEVICE_ID)
            if switch
            else (INTEL_VENDOR, ROOT_PORT_DEVICE_ID)
        )
        self._function(
            pci,
            device,
            "pcieport",
            parent,
            numa_node,
            vendor=vendor,
            pci_class=CLASS_PCI_BRIDGE,
        )
        return f"{parent}/{pci}"

    def gpu(self, parent: str, pci: str, numa_node: int) -> Path:
        """An NVIDIA GPU (3D controller) below ``parent``."""
        return self._function(
            pci,
            GPU_DEVICE_ID,
            "nvidia",
            parent,
            numa_node,
            vendor=NVIDIA_VENDOR,
            pci_class=CLASS_3D_CONTROLLER,
        )

    def _parent_of(self, pci: str) -> str | None:
        link = self.device(pci)
        if not link.is_symlink():
            return None
        target = os.readlink(link)
        marker = "devices/"
        return target[target.index(marker) + len(marker) :].rsplit("/", 1)[0]

    def remove_rdma(self, pci: str, dev: str) -> None:
        shutil.rmtree(self.device(pci) / "infiniband" / dev, ignore_errors=True)

    def set_netdev(self, pci: str, name: str) -> Path:
        """Make ``name`` the function's only netdev (what a driver bind creates)."""
        net = self.device(pci) / "net"
        if net.is_dir():
            for old in net.iterdir():
                if old.name != name:
                    shutil.rmtree(old, ignore_errors=True)
        entry = net / name
        entry.mkdir(parents=True, exist_ok=True)
        (entry / "uevent").write_text(f"INTERFACE={name}\n")
        return entry

    def remove_netdev(self, pci: str) -> None:
        """Drop every netdev of the function (driver unbound, or vfio-pci)."""
        shutil.rmtree(self.device(pci) / "net", ignore_errors=True)

    def netdevs(self, pci: str) -> list[str]:
        net = self.device(pci) / "net"
        return sorted(p.name for p in net.iterdir()) if net.is_dir() else []

    def set_driver(self, pci: str, driver: str | None) -> None:
        """Bind the function to ``driver`` (None = unbound); netdevs are untouched."""
        dev = self.device(pci)
        old = dev / "driver"
        if old.is_symlink():
            stale = self.drivers_dir / os.readlink(old).rsplit("/", 1)[-1] / pci
            if stale.is_symlink():
                stale.unlink()
            old.unlink()
        lines = [f"PCI_SLOT_NAME={pci}"]
        if driver:
            drv = self._driver(driver)
            # "../../drivers/<drv>" from bus/pci/devices; deeper in a topology.
            here = dev.resolve() if dev.is_symlink() else dev
            _relink(dev / "driver", os.path.relpath(drv, here))
            _relink(drv / pci, f"../../devices/{pci}")
            lines.insert(0, f"DRIVER={driver}")
        (dev / "uevent").write_text("\n".join(lines) + "\n")

    # ------------------------------------------------------------ mounting

    @contextmanager
    def mount_over_sys(self, target: Path | str | None = None) -> Iterator[Path]:
        """Bind-mount ``<root>/bus/pci`` over the host PCI directory for the block.

        Only inside a private mount namespace (``unshare -m``): the mount would
        otherwise be visible to every process on the machine. ``target`` defaults
        to the real sysfs PCI directory as ``cni.kernel.sysfs.Sysfs`` names it.
        """
        dst = Path(target) if target is not None else _host_pci_dir()
        _require_private_mount_ns()
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        if libc.mount(bytes(self.pci_dir), bytes(dst), None, _MS_BIND, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"bind {self.pci_dir} over {dst}: {os.strerror(err)}")
        try:
            yield dst
        finally:
            libc.umount2(bytes(dst), _MNT_DETACH)

    # ------------------------------------------------------------ internals

    def _function(
        self,
        pci: str,
        device_id: str,
        driver: str | None,
        parent: str | None = None,
        numa_node: int | None = None,
        vendor: str = MELLANOX_VENDOR,
        pci_class: str = CLASS_ETHERNET,
    ) -> Path:
        dev = self.device(pci)
        if parent is None:
            dev.mkdir(parents=True, exist_ok=True)
            # bus/pci itself; the real link points at ../../../bus/pci, which
            # would leave the subtree that mount_over_sys binds.
            _relink(dev / "subsystem", "../..")
        else:
            real = self.root / "devices" / parent / pci
            real.mkdir(parents=True, exist_ok=True)
            _relink(dev, os.path.relpath(real, self.devices_dir))
            _relink(real / "subsystem", os.path.relpath(self.pci_dir, real))
        (dev / "vendor").write_text(f"{vendor}\n")
        (dev / "device").write_text(f"{device_id}\n")
        (dev / "class").write_text(f"{pci_class}\n")
        if numa_node is not None:
            (dev / "numa_node").write_text(f"{numa_node}\n")
        self.set_driver(pci, driver)
        return dev

    def _driver(self, name: str) -> Path:
        drv = self.drivers_dir / name
        drv.mkdir(parents=True, exist_ok=True)
        for ctl in ("bind", "unbind"):
            (drv / ctl).touch()
        return drv


def _relink(link: Path, target: str) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def _host_pci_dir() -> Path:
    # The one place that names the real sysfs root is cni.kernel.sysfs.
    from cni.kernel.sysfs import Sysfs

    return Path(Sysfs().root) / "bus" / "pci"


def _require_private_mount_ns() -> None:
    """Refuse to mount unless this process left its parent's mount namespace."""
    own = os.stat("/proc/self/ns/mnt").st_ino
    try:
        parent: int | None = os.stat(f"/proc/{os.getppid()}/ns/mnt").st_ino
    except OSError:
        # Unreadable (a parent of another user, e.g. under runuser): not a
        # proof of a private namespace, so it counts as the shared one.
        parent = own
    if own == parent:
        raise RuntimeError(
            "mount_over_sys needs a private mount namespace (run under unshare -m)"
        )
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" - ", 1)[0].split()
        if fields[4] == "/" and any(f.startswith("shared:") for f in fields[6:]):
            raise RuntimeError(
                "mount_over_sys: / is a shared mount here; use unshare -m "
                "(private propagation)"
            )
