# SPDX-License-Identifier: Apache-2.0
"""The fake PCI tree has the real sysfs layout, readable through link basenames."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from railyard_sim.pci_tree import PciTree

PF = "0000:af:00.0"
VF0 = "0000:af:00.2"
VF1 = "0000:af:00.3"


@pytest.fixture
def tree(tmp_path: Path) -> PciTree:
    t = PciTree(tmp_path)
    t.pf(PF, "enp175s0f0", numvfs=2)
    t.vf(PF, 0, VF0, "enp175s0f0v0")
    t.vf(PF, 1, VF1, "enp175s0f0v1")
    return t


def _base(link: Path) -> str:
    return os.readlink(link).rsplit("/", 1)[-1]


def test_everything_lives_under_bus_pci(tree: PciTree, tmp_path: Path) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bus"]
    assert sorted(p.name for p in (tmp_path / "bus").iterdir()) == ["pci"]
    assert (tmp_path / "bus/pci/devices" / VF0).is_dir()


def test_vf_physfn_and_pf_virtfn_links_name_each_other(tree: PciTree) -> None:
    assert _base(tree.device(VF0) / "physfn") == PF
    assert _base(tree.device(PF) / "virtfn0") == VF0
    assert _base(tree.device(PF) / "virtfn1") == VF1
    assert (tree.device(VF1) / "physfn").resolve() == tree.device(PF).resolve()


def test_links_are_relative_and_stay_inside_the_subtree(tree: PciTree) -> None:
    pci_dir = tree.pci_dir.resolve()
    for dev in tree.devices_dir.iterdir():
        for entry in dev.iterdir():
            if entry.is_symlink():
                assert not os.readlink(entry).startswith("/")
                assert entry.resolve().is_relative_to(pci_dir), entry


def test_driver_link_points_into_drivers_with_bind_and_unbind(tree: PciTree) -> None:
    driver = tree.device(VF0) / "driver"
    assert _base(driver) == "mlx5_core"
    assert (driver / "bind").is_file() and (driver / "unbind").is_file()
    assert (tree.drivers_dir / "mlx5_core" / VF0).resolve() == tree.device(
        VF0
    ).resolve()
    assert "DRIVER=mlx5_core" in (tree.device(VF0) / "uevent").read_text()


def test_pf_has_sriov_numvfs_and_totalvfs(tmp_path: Path) -> None:
    t = PciTree(tmp_path)
    t.pf(PF, "enp175s0f0", numvfs=4, totalvfs=16)
    assert (t.device(PF) / "sriov_numvfs").read_text().strip() == "4"
    assert (t.device(PF) / "sriov_totalvfs").read_text().strip() == "16"
    assert not (t.device(PF) / "physfn").exists()


def test_pf_netdev_is_visible_through_the_vf_physfn(tree: PciTree) -> None:
    assert [p.name for p in (tree.device(VF0) / "physfn" / "net").iterdir()] == [
        "enp175s0f0"
    ]


def test_rdma_device_is_a_directory_under_infiniband(tree: PciTree) -> None:
    tree.rdma(VF0, "mlx5_3")
    assert [p.name for p in (tree.device(VF0) / "infiniband").iterdir()] == ["mlx5_3"]
    tree.remove_rdma(VF0, "mlx5_3")
    assert list((tree.device(VF0) / "infiniband").iterdir()) == []


def test_set_netdev_replaces_the_name_as_a_rebind_would(tree: PciTree) -> None:
    tree.set_netdev(VF0, "ib7")
    assert tree.netdevs(VF0) == ["ib7"]
    tree.remove_netdev(VF0)
    assert tree.netdevs(VF0) == []


def test_set_driver_to_vfio_relinks_and_unlists_the_old_driver(tree: PciTree) -> None:
    tree.set_driver(VF1, "vfio-pci")
    assert _base(tree.device(VF1) / "driver") == "vfio-pci"
    assert not (tree.drivers_dir / "mlx5_core" / VF1).exists()
    assert (tree.drivers_dir / "vfio-pci" / VF1).is_symlink()
    tree.set_driver(VF1, None)
    assert not (tree.device(VF1) / "driver").exists()
    assert "DRIVER" not in (tree.device(VF1) / "uevent").read_text()


def test_vf_before_its_pf_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        PciTree(tmp_path).vf(PF, 0, VF0, "x")


def test_mount_over_sys_refuses_the_shared_mount_namespace(
    tree: PciTree, tmp_path: Path
) -> None:
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(RuntimeError, match="private mount namespace"):
        with tree.mount_over_sys(target):
            pass
    assert list(target.iterdir()) == []
