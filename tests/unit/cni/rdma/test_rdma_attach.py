# SPDX-License-Identifier: Apache-2.0
"""cni.attach.rdma: resolve, exclusive-mode gate, move in with rollback, move out."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cni.attach.rdma import (
    MoveOutcome,
    move_rdma_in,
    move_rdma_out,
    require_exclusive,
    resolve_rdma_device,
)
from cni.errors import DEVICE_ERROR, CniError
from cni.kernel import (
    DeviceBusy,
)
from cni.kernel.sysfs import Sysfs
from cni.rollback import Rollback
from railyard_sim.pci_tree import PciTree
from tests.unit.cni.rdma.fakes import POD, FakeRdma

PF = "0000:3b:00.0"
VF = "0000:3b:00.2"


@pytest.fixture
def tree(tmp_path: Path) -> PciTree:
    t = PciTree(tmp_path / "sys")
    t.pf(PF, "ib0", numvfs=1)
    t.vf(PF, 0, VF, "ib1")
    return t


def sysfs(tree: PciTree) -> Sysfs:
    return Sysfs(root=tree.root)


# ------------------------------------------------------------- resolve


def test_resolve_returns_the_single_device_under_infiniband(tree: PciTree) -> None:
    tree.rdma(VF, "mlx5_27")
    assert resolve_rdma_device(sysfs(tree), VF) == "mlx5_27"


def test_resolve_without_any_device_says_none_found(tree: PciTree) -> None:
    with pytest.raises(CniError) as info:
        resolve_rdma_device(sysfs(tree), VF)
    assert info.value.code == DEVICE_ERROR
    assert info.value.msg == f"failed to get RDMA device for device ID {VF}"
    assert "no RDMA devices found" in info.value.details


def test_resolve_with_two_devices_is_an_unsupported_state(tree: PciTree) -> None:
    tree.rdma(VF, "mlx5_3")
    tree.rdma(VF, "mlx5_4")
    with pytest.raises(CniError) as info:
        resolve_rdma_device(sysfs(tree), VF)
    assert "more than one RDMA device ['mlx5_3', 'mlx5_4']" in info.value.details
    assert "Unsupported state" in info.value.details


def test_resolve_of_an_unknown_pci_names_it(tree: PciTree) -> None:
    with pytest.raises(CniError, match="0000:99:00.1") as info:
        resolve_rdma_device(sysfs(tree), "0000:99:00.1")
    assert "no PCI device 0000:99:00.1" in info.value.details


def test_resolve_of_a_non_pci_device_id_says_only_pci_is_supported(
    tree: PciTree,
) -> None:
    with pytest.raises(CniError) as info:
        resolve_rdma_device(sysfs(tree), "mlx5_core.sf.2")
    assert "auxiliary/SF devices are not supported" in info.value.details


# ---------------------------------------------------- exclusive mode gate


def test_exclusive_mode_passes() -> None:
    require_exclusive(FakeRdma("exclusive"))


def test_shared_mode_is_refused_with_how_to_switch() -> None:
    with pytest.raises(CniError) as info:
        require_exclusive(FakeRdma("shared"))
    err = info.value
    assert err.code == DEVICE_ERROR
    assert "mode is set to shared, expecting it to be set to exclusive" in err.msg
    assert "rdma system set netns exclusive" in err.details
    assert "options ib_core netns_mode=0" in err.details


def test_host_without_rdma_gets_a_clear_error() -> None:
    with pytest.raises(CniError) as info:
        require_exclusive(FakeRdma("unsupported"))
    assert info.value.msg == "RDMA is not available on this host"
    assert "no RDMA netlink support" in info.value.details


# ------------------------------------------------------------- move in


def test_move_in_moves_and_registers_the_move_back() -> None:
    rdma = FakeRdma(mlx5_4=None)
    with Rollback() as rb:
        move_rdma_in(rdma, "mlx5_4", POD, rb)
        assert rdma.where["mlx5_4"] == POD
        assert rb.descriptions == ["move RDMA device mlx5_4 back"]
        rb.commit()
    assert rdma.where["mlx5_4"] == POD


def test_a_later_failure_in_the_add_moves_the_device_back() -> None:
    rdma = FakeRdma(mlx5_4=None)
    with pytest.raises(CniError, match="address allocation failed"):
        with Rollback() as rb:
            move_rdma_in(rdma, "mlx5_4", POD, rb)
            raise CniError(101, "address allocation failed")
    assert rdma.where["mlx5_4"] is None
    # Moved back from inside the pod netns, to the plugin's own netns.
    assert rdma.calls[-1] == ("mlx5_4", None, POD)


def test_move_in_failure_is_a_device_error_and_registers_nothing() -> None:
    rdma = FakeRdma(mlx5_4=None)
    rdma.fail_move = DeviceBusy("EBUSY")
    rb = Rollback()
    with pytest.raises(CniError) as info:
        move_rdma_in(rdma, "mlx5_4", POD, rb)
    assert info.value.msg == f"failed to move RDMA device mlx5_4 to netns {POD}"
    assert len(rb) == 0


# ------------------------------------------------------------ move out


def test_move_out_moves_the_device_home_from_the_pod() -> None:
    rdma = FakeRdma(mlx5_4=POD)
    assert move_rdma_out(rdma, "mlx5_4", POD) is MoveOutcome.MOVED
    assert rdma.where["mlx5_4"] is None


def test_move_out_after_the_netns_died_finds_it_already_home() -> None:
    rdma = FakeRdma(mlx5_4=POD)
    rdma.vanish(POD)
    assert move_rdma_out(rdma, "mlx5_4", POD) is MoveOutcome.ALREADY_HOME


def test_move_out_with_empty_netns_checks_the_host() -> None:
    rdma = FakeRdma(mlx5_4=None)
    assert move_rdma_out(rdma, "mlx5_4", "") is MoveOutcome.ALREADY_HOME
    assert rdma.calls == []


def test_second_move_out_is_idempotent() -> None:
    rdma = FakeRdma(mlx5_4=POD)
    move_rdma_out(rdma, "mlx5_4", POD)
    assert move_rdma_out(rdma, "mlx5_4", POD) is MoveOutcome.ALREADY_HOME


def test_device_in_neither_place_is_warned_not_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rdma = FakeRdma()
    with caplog.at_level(logging.WARNING):
        assert move_rdma_out(rdma, "mlx5_9", POD) is MoveOutcome.NOT_FOUND
    assert "neither in" in caplog.text


def test_move_out_refused_by_the_kernel_raises_for_a_retry() -> None:
    rdma = FakeRdma(mlx5_4=POD)
    rdma.fail_move = DeviceBusy("EBUSY: device in use")
    with pytest.raises(CniError) as info:
        move_rdma_out(rdma, "mlx5_4", POD)
    assert info.value.msg == "failed to restore RDMA device mlx5_4 to default namespace"
    assert "EBUSY" in info.value.details
