# SPDX-License-Identifier: Apache-2.0
"""``ConfigfsRoceTos`` on a tree laid out like sysfs and configfs, and the
kernel's rules for RDMA device names and TOS values."""

from __future__ import annotations

from pathlib import Path

import pytest

from cni.kernel import DeviceNotFound, InvalidArgument, NotSupported, PortTos
from cni.kernel.rdma_rules import check_device_name, check_roce_tos, dscp_of
from cni.kernel.roce import ConfigfsRoceTos
from railyard_sim.pci_tree import PciTree

VF = "0000:3b:00.2"


@pytest.fixture
def tree(tmp_path: Path) -> PciTree:
    tree = PciTree(tmp_path)
    tree.pf("0000:3b:00.0", "ens1", 1)
    tree.vf("0000:3b:00.0", 0, VF, "ens1v0")
    tree.rdma(VF, "mlx5_2")
    return tree


def test_mlx5_traffic_class_reads_as_its_global_tclass(tree: PciTree) -> None:
    tc = tree.device(VF) / "infiniband/mlx5_2/tc/1/traffic_class"
    tc.write_text("Global tclass=106\n")
    state = ConfigfsRoceTos(tree.root).read("mlx5_2", VF)
    assert state.ports == (PortTos(1, None, 106, True),)
    assert not state.group_existed


def test_no_rdma_cm_in_configfs_is_not_supported_and_changes_nothing(
    tree: PciTree,
) -> None:
    with pytest.raises(NotSupported, match="modprobe rdma_cm"):
        ConfigfsRoceTos(tree.root).apply("mlx5_2", VF, 106)
    tc = tree.device(VF) / "infiniband/mlx5_2/tc/1/traffic_class"
    assert tc.read_text() == ""


def test_a_group_without_ports_is_removed_again(tree: PciTree) -> None:
    # Plain mkdir (not configfs): no ports/ appear, the write fails, and the
    # group the adapter made is gone before the error is raised.
    cm = tree.root / "kernel/config/rdma_cm"
    cm.mkdir(parents=True)
    with pytest.raises(DeviceNotFound):
        ConfigfsRoceTos(tree.root).apply("mlx5_2", VF, 106)
    assert list(cm.iterdir()) == []


@pytest.mark.parametrize("name", ["rail1", "mlx5_0", "a" * 63, "r-1.b_c"])
def test_names_the_kernel_takes(name: str) -> None:
    assert check_device_name(name) == name


@pytest.mark.parametrize("name", ["", "a" * 64, ".", "..", "a/b", "a b", "mlx5_%d"])
def test_names_the_kernel_refuses_or_rewrites(name: str) -> None:
    with pytest.raises(InvalidArgument):
        check_device_name(name)


def test_tos_range_and_dscp() -> None:
    assert check_roce_tos(106) == 106 and dscp_of(106) == 26
    for bad in (-1, 256, "106", True, 1.5):
        with pytest.raises(InvalidArgument):
            check_roce_tos(bad)
