# SPDX-License-Identifier: Apache-2.0
"""Resolve a VF from its PCI address: PF, VF index, netdev, driver, RDMA devices.

Standard library and the contract modules only; sysfs is read through
``cni.kernel.sysfs.Sysfs`` (passed in, never imported here).

Messages follow sriov-cni ``pkg/utils/utils.go``. A function
that is not a VF (no ``physfn``) is refused, with the reason, rather than the
peer's bare ``lstat .../physfn/net`` error (sriov-cni #206).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cni.errors import DEVICE_ERROR, CniError
from cni.kernel import DeviceNotFound, KernelError, LinkInfo, PciDevice, VfInfo

#: Drivers that take a VF away from the kernel's netdev stack (sriov-cni).
DPDK_DRIVERS = frozenset({"vfio-pci", "uio_pci_generic", "igb_uio"})


class PciLookup(Protocol):
    """The part of ``cni.kernel.sysfs.Sysfs`` this module needs."""

    def device(self, pci: str) -> PciDevice: ...


@dataclass(frozen=True, slots=True)
class VfDevice:
    """A VF as the host sees it before ADD changes anything."""

    pci: str
    pf: str  # PF netdev name
    vf_index: int
    netdev: str | None  # None for DPDK-bound VFs
    driver: str | None
    dpdk: bool
    rdma_devices: tuple[str, ...] = ()


def resolve_vf(sysfs: PciLookup, pci: str) -> VfDevice:
    """Read the VF's identity from sysfs; CniError 100 with the peer's texts."""
    try:
        dev = sysfs.device(pci)
    except (DeviceNotFound, KernelError, OSError) as exc:
        raise CniError(
            DEVICE_ERROR, "LoadConf(): failed to get VF information", str(exc)
        ) from exc
    if dev.pf_pci is None:
        raise CniError(
            DEVICE_ERROR,
            "LoadConf(): failed to get VF information",
            f"{pci} is not an SR-IOV VF (no physfn link)",
        )
    if not dev.pf_netdev:
        raise CniError(
            DEVICE_ERROR,
            "LoadConf(): failed to get VF information",
            "PF network device not found",
        )
    if dev.vf_index is None:
        raise CniError(
            DEVICE_ERROR,
            "LoadConf(): failed to get VF information",
            f"unable to get VF ID with PF: {dev.pf_netdev} and VF pci address {pci}",
        )
    netdev = dev.netdevs[0] if dev.netdevs else None
    dpdk = netdev is None and dev.driver in DPDK_DRIVERS
    if netdev is None and not dpdk:
        raise CniError(
            DEVICE_ERROR,
            f"LoadConf(): the VF {pci} does not have a interface name or a dpdk driver",
        )
    return VfDevice(
        pci=pci,
        pf=dev.pf_netdev,
        vf_index=dev.vf_index,
        netdev=netdev,
        driver=dev.driver,
        dpdk=dpdk,
        rdma_devices=dev.rdma_devices,
    )


def host_netdevs(sysfs: PciLookup, pci: str) -> list[str]:
    """Netdev names sysfs shows for ``pci`` from the host (DEL's locator)."""
    try:
        return list(sysfs.device(pci).netdevs)
    except (DeviceNotFound, KernelError, OSError):
        return []


ARPHRD_INFINIBAND = 32
INFINIBAND = "infiniband"
ETHERNET = "ethernet"


def link_kind(vf_link: LinkInfo | None, pf_link: LinkInfo | None, vf: VfInfo) -> str:
    """``infiniband`` or ``ethernet``: what the VF is, from what the host shows.

    The netdev's ARPHRD type says it on a real host; a DPDK-bound VF has no
    netdev, so its PF's type counts, and so does the PF's VF entry: only an
    IPoIB PF reports VF GUIDs (``ndo_get_vf_guid``), which is also what tells
    the simulated host's veth stand-ins apart.
    """
    types = {ln.link_type for ln in (vf_link, pf_link) if ln is not None}
    if ARPHRD_INFINIBAND in types or vf.node_guid or vf.port_guid:
        return INFINIBAND
    return ETHERNET


def require_link_kind(
    plugin: str, dev: VfDevice, have: str, want: str, why: str
) -> None:
    """Refuse, before the first change, a VF of the wrong kind for ``plugin``."""
    if not want or have == want:
        return
    raise CniError(
        DEVICE_ERROR,
        f"VF {dev.pci} is an {have} VF; {plugin} needs an {want} VF",
        f"{why} (link type {have} on PF {dev.pf}); use the "
        f"{'ib-sriov' if have == INFINIBAND else 'sriov'} plugin for this device",
    )
