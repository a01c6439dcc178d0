# SPDX-License-Identifier: Apache-2.0
"""Sysfs PCI discovery on a hand-written fake tree (real layout, relative links)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cni.kernel import DeviceNotFound, InvalidArgument, PciDevice
from cni.kernel.sysfs import DPDK_DRIVERS, Sysfs, check_pci

PF = "0000:af:00.0"
VF0 = "0000:af:00.2"
VF1 = "0000:af:00.3"
NIC = "0000:3b:00.0"  # a device without SR-IOV


def function(root: Path, pci: str, driver: str | None) -> Path:
    dev = root / "bus/pci/devices" / pci
    dev.mkdir(parents=True)
    (dev / "uevent").write_text(f"PCI_SLOT_NAME={pci}\n")
    if driver:
        drv = root / "bus/pci/drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        for name in ("bind", "unbind"):
            (drv / name).touch()
        os.symlink(f"../../drivers/{driver}", dev / "driver")
    return dev


@pytest.fixture
def root(tmp_path: Path) -> Path:
    pf = function(tmp_path, PF, "mlx5_core")
    (pf / "sriov_numvfs").write_text("2\n")
    (pf / "sriov_totalvfs").write_text("8\n")
    (pf / "net/enp175s0f0").mkdir(parents=True)
    (pf / "infiniband/mlx5_0").mkdir(parents=True)
    for index, (pci, netdev, driver) in enumerate(
        [(VF0, "enp175s0f0v0", "mlx5_core"), (VF1, None, "vfio-pci")]
    ):
        vf = function(tmp_path, pci, driver)
        os.symlink(f"../{PF}", vf / "physfn")
        os.symlink(f"../{pci}", pf / f"virtfn{index}")
        if netdev:
            (vf / "net" / netdev).mkdir(parents=True)
            (vf / "infiniband/mlx5_2").mkdir(parents=True)
    function(tmp_path, NIC, None)
    return tmp_path


def test_vf_device_has_pf_fields_and_index(root: Path):
    assert Sysfs(root).device(VF0) == PciDevice(
        pci=VF0,
        driver="mlx5_core",
        netdevs=("enp175s0f0v0",),
        rdma_devices=("mlx5_2",),
        pf_pci=PF,
        pf_netdev="enp175s0f0",
        vf_index=0,
    )


def test_vf_bound_to_vfio_has_no_netdev_and_is_dpdk(root: Path):
    sysfs = Sysfs(root)
    info = sysfs.device(VF1)
    assert (info.driver, info.netdevs, info.vf_index) == ("vfio-pci", (), 1)
    assert sysfs.is_dpdk(VF1)
    assert not sysfs.is_dpdk(VF0)
    assert DPDK_DRIVERS == {"vfio-pci", "uio_pci_generic", "igb_uio"}


def test_pf_device_has_no_pf_fields(root: Path):
    info = Sysfs(root).device(PF)
    assert (info.pf_pci, info.pf_netdev, info.vf_index) == (None, None, None)
    assert info.netdevs == ("enp175s0f0",)


def test_vf_device_rejects_a_pf_with_a_clear_message(root: Path):
    with pytest.raises(DeviceNotFound, match="is an SR-IOV PF"):
        Sysfs(root).vf_device(PF)
    with pytest.raises(DeviceNotFound, match="not an SR-IOV VF"):
        Sysfs(root).vf_device(NIC)
    assert Sysfs(root).vf_device(VF0).vf_index == 0


def test_unknown_pci_device_is_device_not_found(root: Path):
    with pytest.raises(DeviceNotFound, match="no PCI device 0000:af:01.0"):
        Sysfs(root).device("0000:af:01.0")


@pytest.mark.parametrize(
    "bad",
    ["af:00.2", "0000:af:00.8", "0000:af:0.2", "0000:af:00.2/..", "0000:af:00.2\n", ""],
)
def test_malformed_pci_address_is_invalid_argument(root: Path, bad: str):
    with pytest.raises(InvalidArgument):
        Sysfs(root).device(bad)


def test_pci_address_accepts_upper_and_lower_hex():
    assert check_pci("0000:AF:00.7") == "0000:AF:00.7"


def test_small_queries(root: Path):
    sysfs = Sysfs(root)
    assert sysfs.driver(VF0) == "mlx5_core"
    assert sysfs.driver(NIC) is None
    assert sysfs.netdevs(VF0) == ("enp175s0f0v0",)
    assert sysfs.rdma_devices(PF) == ("mlx5_0",)
    assert sysfs.is_vf(VF0) and not sysfs.is_vf(PF)
    assert sysfs.pf_of(VF1) == PF and sysfs.pf_of(PF) is None
    assert sysfs.pfs() == [PF]
    assert sysfs.vfs(PF) == {0: VF0, 1: VF1}
    assert sysfs.numvfs(PF) == 2
    assert sysfs.driver_path("vfio-pci") == root / "bus/pci/drivers/vfio-pci"


def test_numvfs_of_a_non_sriov_device_is_device_not_found(root: Path):
    with pytest.raises(DeviceNotFound, match="not an SR-IOV PF"):
        Sysfs(root).numvfs(NIC)


def test_vf_whose_pf_lost_the_virtfn_link_has_no_index(root: Path):
    (root / "bus/pci/devices" / PF / "virtfn0").unlink()
    assert Sysfs(root).device(VF0).vf_index is None
    with pytest.raises(DeviceNotFound, match="unable to get VF ID with PF enp175s0f0"):
        Sysfs(root).vf_device(VF0)


def test_vf_whose_pf_has_no_netdev(root: Path):
    (root / "bus/pci/devices" / PF / "net/enp175s0f0").rmdir()
    assert Sysfs(root).device(VF0).pf_netdev is None
    with pytest.raises(DeviceNotFound, match="has no network device"):
        Sysfs(root).vf_device(VF0)


def test_moved_vf_netdev_leaves_net_empty(root: Path):
    # A VF whose netdev moved into a pod: the host's net/ view is empty.
    (root / "bus/pci/devices" / VF0 / "net/enp175s0f0v0").rmdir()
    assert Sysfs(root).device(VF0).netdevs == ()


def test_only_link_basenames_are_used(root: Path):
    # Absolute link targets elsewhere (as in a bind-mounted tree) resolve by name.
    vf = root / "bus/pci/devices" / VF0
    (vf / "physfn").unlink()
    os.symlink(f"/nonexistent/devices/pci0000:00/{PF}", vf / "physfn")
    assert Sysfs(root).device(VF0).pf_pci == PF


def test_missing_driver_dir_is_device_not_found(root: Path):
    with pytest.raises(DeviceNotFound, match="no PCI driver igb_uio"):
        Sysfs(root).driver_path("igb_uio")


def test_reads_the_sim_builders_tree(tmp_path: Path):
    from railyard_sim.pci_tree import PciTree

    tree = PciTree(tmp_path)
    tree.pf(PF, netdev="enp175s0f0", numvfs=1)
    tree.vf(PF, index=0, pci=VF0, netdev="enp175s0f0v0")
    info = Sysfs(tmp_path).device(VF0)
    assert (info.pf_pci, info.pf_netdev, info.vf_index, info.netdevs) == (
        PF,
        "enp175s0f0",
        0,
        ("enp175s0f0v0",),
    )
