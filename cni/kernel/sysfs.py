# SPDX-License-Identifier: Apache-2.0
"""PCI discovery from sysfs with plain pathlib reads under a configurable root.

May import: the standard library and ``cni.kernel`` only (no pyudev: libudev
refuses fake trees). This is the one module that spells "/sys".

Layout read (real sysfs, the simulated lab's tree and a tree bind-mounted over
``/sys/bus/pci`` are all the same shape)::

    <root>/bus/pci/devices/<pci>/physfn -> ../<pf_pci>          (VFs)
    <root>/bus/pci/devices/<pci>/virtfnN -> ../<vf_pci>         (PFs)
    <root>/bus/pci/devices/<pci>/driver -> ../../drivers/<drv>
    <root>/bus/pci/devices/<pci>/net/<ifname>/
    <root>/bus/pci/devices/<pci>/infiniband/<rdmadev>/
    <root>/bus/pci/devices/<pci>/sriov_numvfs, sriov_totalvfs    (PFs)
    <root>/bus/pci/drivers/<drv>/{bind,unbind}

Only link *basenames* are used, never resolved absolute paths, so the same code
works on every one of those trees. ``net/`` is namespace-tagged on a real host:
once a VF's netdev moves to a pod, the host view of ``net/`` is empty.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cni.kernel import DeviceNotFound, InvalidArgument, PciDevice
from cni.netconf_fields import is_pci_address

DPDK_DRIVERS = frozenset({"vfio-pci", "uio_pci_generic", "igb_uio"})
_VIRTFN = re.compile(r"^virtfn(\d+)$")


def check_pci(pci: str) -> str:
    """``pci`` if it is a full PCI address ("0000:af:00.2"), else InvalidArgument."""
    if not is_pci_address(pci):
        raise InvalidArgument(
            f"{pci!r} is not a PCI address (expected DDDD:BB:DD.F, e.g. 0000:af:00.2)"
        )
    return pci


def _entries(path: Path) -> tuple[str, ...]:
    try:
        return tuple(sorted(p.name for p in path.iterdir()))
    except (FileNotFoundError, NotADirectoryError):
        return ()


def _link_basename(path: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except (FileNotFoundError, OSError):
        return None


class Sysfs:
    """Read-only PCI view (plus driver paths for bind/unbind) under ``root``."""

    def __init__(self, root: Path = Path("/sys")) -> None:
        self.root = Path(root)
        self.devices_dir = self.root / "bus" / "pci" / "devices"
        self.drivers_dir = self.root / "bus" / "pci" / "drivers"

    def _dev(self, pci: str) -> Path:
        path = self.devices_dir / check_pci(pci)
        if not path.is_dir():
            raise DeviceNotFound(f"no PCI device {pci} (no {path})")
        return path

    def exists(self, pci: str) -> bool:
        return (self.devices_dir / check_pci(pci)).is_dir()

    def driver(self, pci: str) -> str | None:
        """Basename of the bound driver, None when unbound."""
        return _link_basename(self._dev(pci) / "driver")

    def is_dpdk(self, pci: str) -> bool:
        """Bound to a userspace (DPDK) driver: no netdev is expected."""
        return self.driver(pci) in DPDK_DRIVERS

    def netdevs(self, pci: str) -> tuple[str, ...]:
        return _entries(self._dev(pci) / "net")

    def rdma_devices(self, pci: str) -> tuple[str, ...]:
        return _entries(self._dev(pci) / "infiniband")

    def is_vf(self, pci: str) -> bool:
        return (self._dev(pci) / "physfn").is_symlink()

    def pf_of(self, pci: str) -> str | None:
        """The PF's PCI address for a VF, None for anything else."""
        return _link_basename(self._dev(pci) / "physfn")

    def vfs(self, pf_pci: str) -> dict[int, str]:
        """VF index -> VF PCI address, from the PF's virtfnN links."""
        self._dev(pf_pci)
        return self._virtfns(pf_pci)

    def _virtfns(self, pf_pci: str) -> dict[int, str]:
        out: dict[int, str] = {}
        for name in _entries(self.devices_dir / pf_pci):
            m = _VIRTFN.match(name)
            if m:
                target = _link_basename(self.devices_dir / pf_pci / name)
                if target:
                    out[int(m.group(1))] = target
        return dict(sorted(out.items()))

    def numvfs(self, pf_pci: str) -> int:
        path = self._dev(pf_pci) / "sriov_numvfs"
        try:
            return int(path.read_text().strip() or "0")
        except FileNotFoundError as exc:
            raise DeviceNotFound(f"{pf_pci} is not an SR-IOV PF (no {path})") from exc

    def pfs(self) -> list[str]:
        """PCI addresses of every SR-IOV capable device (those with sriov_numvfs)."""
        return sorted(
            d.name
            for d in _iter_dirs(self.devices_dir)
            if (d / "sriov_numvfs").exists()
        )

    def device(self, pci: str) -> PciDevice:
        """Everything discovery needs about a function; a VF gets its PF fields.

        Raises DeviceNotFound only for an unknown address. A PF or a non-SR-IOV
        device has ``pf_pci=None``; a VF whose PF shows no netdev or no
        ``virtfnN`` link to it has ``pf_netdev`` / ``vf_index`` None (callers word
        those errors; ``vf_device`` raises for all three).
        """
        dev = self._dev(pci)
        pf_pci = _link_basename(dev / "physfn")
        pf_netdev = None
        vf_index = None
        if pf_pci is not None:
            pf_nets = self.netdevs(pf_pci)
            pf_netdev = pf_nets[0] if pf_nets else None
            for index, vf_pci in self._virtfns(pf_pci).items():
                if vf_pci == pci:
                    vf_index = index
                    break
        return PciDevice(
            pci=pci,
            driver=_link_basename(dev / "driver"),
            netdevs=self.netdevs(pci),
            rdma_devices=_entries(dev / "infiniband"),
            pf_pci=pf_pci,
            pf_netdev=pf_netdev,
            vf_index=vf_index,
        )

    def vf_device(self, pci: str) -> PciDevice:
        """``device(pci)`` that insists on a VF (DeviceNotFound for a PF)."""
        info = self.device(pci)
        if info.pf_pci is None:
            what = (
                "an SR-IOV PF"
                if (self.devices_dir / pci / "sriov_numvfs").exists()
                else "not an SR-IOV VF"
            )
            raise DeviceNotFound(
                f"{pci} is {what} (no physfn link): deviceID must name a VF"
            )
        if info.pf_netdev is None:
            raise DeviceNotFound(f"VF {pci}: PF {info.pf_pci} has no network device")
        if info.vf_index is None:
            raise DeviceNotFound(
                f"unable to get VF ID with PF {info.pf_netdev} and VF pci address {pci}"
            )
        return info

    def driver_path(self, driver: str) -> Path:
        """The driver's directory holding ``bind`` and ``unbind``."""
        path = self.drivers_dir / driver
        if not path.is_dir():
            raise DeviceNotFound(f"no PCI driver {driver} (no {path})")
        return path


def _iter_dirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except FileNotFoundError:
        return []
