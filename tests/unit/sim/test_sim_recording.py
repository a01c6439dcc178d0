# SPDX-License-Identifier: Apache-2.0
"""The recording seam keeps VF tables and RDMA locations across plugin processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cni.kernel import (
    DeviceNotFound,
    InvalidArgument,
    LinkNotFound,
    NetnsNotFound,
    NotSupported,
    VfInfo,
)
from railyard_sim.lab import Manifest, plan
from railyard_sim.pci_tree import PciTree
from railyard_sim.recording import (
    Faults,
    Journal,
    RecordingRdmaOps,
    RecordingVfOps,
    init_state,
    read_state,
    renumber_rdma,
    set_netns_mode,
)


@pytest.fixture
def manifest(tmp_path: Path) -> Manifest:
    m = plan("beef", tmp_path, rails=1, vfs_per_pf=2, ib_rails=1)
    init_state(tmp_path, m)
    return m


@pytest.fixture
def pf(manifest: Manifest) -> str:
    return manifest.rails[0].pf_netdev


@pytest.fixture
def ib_pf(manifest: Manifest) -> str:
    return manifest.rails[1].pf_netdev


def test_initial_vf_table_is_the_kernel_default(tmp_path: Path, pf: str) -> None:
    assert RecordingVfOps(tmp_path).get_vf(pf, 1) == VfInfo(
        vf=1,
        mac="00:00:00:00:00:00",
        vlan=0,
        qos=0,
        vlan_proto=0x8100,
        spoofchk=True,
        trust=False,
        link_state=0,
        min_tx_rate=0,
        max_tx_rate=0,
    )


def test_ib_vfs_start_with_a_unique_nonzero_guid(tmp_path: Path, ib_pf: str) -> None:
    ops = RecordingVfOps(tmp_path)
    guids = {ops.get_vf(ib_pf, i).node_guid for i in (0, 1)}
    assert len(guids) == 2
    assert None not in guids and "00:00:00:00:00:00:00:00" not in guids


def test_every_call_is_journaled_with_its_arguments(tmp_path: Path, pf: str) -> None:
    ops = RecordingVfOps(tmp_path)
    ops.set_spoofchk(pf, 1, False)
    ops.get_vf(pf, 1)
    entries = Journal(tmp_path).entries()
    assert [e.op for e in entries] == ["set_spoofchk", "get_vf"]
    assert entries[0].args == {"pf": pf, "vf": 1, "on": False}
    assert entries[0].error is None
    assert [e.op for e in Journal(tmp_path).entries("get_vf")] == ["get_vf"]


def test_injected_fault_raises_the_contract_exception_and_changes_nothing(
    tmp_path: Path, pf: str
) -> None:
    Faults(tmp_path).inject("set_trust", "EOPNOTSUPP")
    ops = RecordingVfOps(tmp_path)
    with pytest.raises(NotSupported) as caught:
        ops.set_trust(pf, 0, True)
    assert caught.value.errno == 95
    assert ops.get_vf(pf, 0).trust is False
    assert Journal(tmp_path).entries("set_trust")[0].error == "NotSupported"


def test_fault_with_count_fires_that_many_times(tmp_path: Path, pf: str) -> None:
    Faults(tmp_path).inject("set_mac", "EBUSY", count=1)
    ops = RecordingVfOps(tmp_path)
    with pytest.raises(Exception, match="injected EBUSY"):
        ops.set_mac(pf, 0, "02:00:00:00:00:01")
    ops.set_mac(pf, 0, "02:00:00:00:00:01")
    assert ops.get_vf(pf, 0).mac == "02:00:00:00:00:01"
    assert Faults(tmp_path).pending() == {}


def test_fault_can_match_arguments(tmp_path: Path, pf: str) -> None:
    Faults(tmp_path).inject("set_vlan", "InvalidArgument", match={"vf": 1})
    ops = RecordingVfOps(tmp_path)
    ops.set_vlan(pf, 0, 5, 0, 0x8100)
    with pytest.raises(InvalidArgument):
        ops.set_vlan(pf, 1, 5, 0, 0x8100)


def test_faults_written_as_plain_json_are_honoured(tmp_path: Path, pf: str) -> None:
    (tmp_path / "faults.json").write_text('{"set_rate": "EINVAL"}')
    with pytest.raises(InvalidArgument):
        RecordingVfOps(tmp_path).set_rate(pf, 0, 1, 2)


def test_unknown_pf_and_vf_are_refused(tmp_path: Path, pf: str) -> None:
    ops = RecordingVfOps(tmp_path)
    with pytest.raises(LinkNotFound):
        ops.get_vf("nope0", 0)
    with pytest.raises(DeviceNotFound, match="has no VF 9"):
        ops.get_vf(pf, 9)  # as the netlink adapter reads a table without it
    with pytest.raises(InvalidArgument):
        ops.set_trust(pf, 9, True)  # as the driver answers a setter


# The kernel's answers below are pinned on a real VF table in
# tests/realkernel/test_vf_netdevsim.py; the simulated host answers the same.


def test_a_multicast_mac_is_refused_like_the_kernel(tmp_path: Path, pf: str) -> None:
    ops = RecordingVfOps(tmp_path)
    with pytest.raises(InvalidArgument, match="multicast MAC 01:00:5e:00:00:01"):
        ops.set_mac(pf, 0, "01:00:5e:00:00:01")
    ops.set_mac(pf, 0, "02:00:5e:00:00:01")
    assert ops.get_vf(pf, 0).mac == "02:00:5e:00:00:01"


def test_vlan_range_and_protocols_as_the_kernel_checks_them(
    tmp_path: Path, pf: str
) -> None:
    ops = RecordingVfOps(tmp_path)
    ops.set_vlan(pf, 0, 4095, 7, 0x1234)  # any protocol reaches the driver
    got = ops.get_vf(pf, 0)
    assert (got.vlan, got.qos, got.vlan_proto) == (4095, 7, 0x1234)
    for vlan, qos in ((4096, 0), (1, 8)):
        with pytest.raises(InvalidArgument) as err:
            ops.set_vlan(pf, 0, vlan, qos, 0x8100)
        assert err.value.errno == 22


def test_min_rate_above_max_rate_is_refused_like_mlx5(tmp_path: Path, pf: str) -> None:
    with pytest.raises(InvalidArgument):
        RecordingVfOps(tmp_path).set_rate(pf, 0, 200, 100)


def test_ipoib_pf_refuses_ethernet_settings(tmp_path: Path, ib_pf: str) -> None:
    ops = RecordingVfOps(tmp_path)
    for call in (
        lambda: ops.set_vlan(ib_pf, 0, 1, 0, 0x8100),
        lambda: ops.set_mac(ib_pf, 0, "02:00:00:00:00:01"),
        lambda: ops.set_trust(ib_pf, 0, True),
        lambda: ops.set_spoofchk(ib_pf, 0, False),
        lambda: ops.set_rate(ib_pf, 0, 0, 10),
    ):
        with pytest.raises(NotSupported):
            call()
    ops.set_link_state(ib_pf, 0, 1)
    assert ops.get_vf(ib_pf, 0).link_state == 1


def test_guids_are_set_on_ib_and_refused_on_ethernet(
    tmp_path: Path, pf: str, ib_pf: str
) -> None:
    ops = RecordingVfOps(tmp_path)
    ops.set_node_guid(ib_pf, 1, "AA:BB:CC:DD:EE:FF:00:11")
    ops.set_port_guid(ib_pf, 1, "aa:bb:cc:dd:ee:ff:00:12")
    info = ops.get_vf(ib_pf, 1)
    assert (info.node_guid, info.port_guid) == (
        "aa:bb:cc:dd:ee:ff:00:11",
        "aa:bb:cc:dd:ee:ff:00:12",
    )
    with pytest.raises(NotSupported):
        ops.set_node_guid(pf, 0, "aa:bb:cc:dd:ee:ff:00:11")
    with pytest.raises(InvalidArgument):
        ops.set_node_guid(ib_pf, 0, "aa:bb")


def test_rebind_of_an_unknown_pci_is_device_not_found(tmp_path: Path) -> None:
    with pytest.raises(DeviceNotFound):
        RecordingVfOps(tmp_path).rebind("0000:ff:00.2")


def test_all_rdma_devices_start_in_the_host(tmp_path: Path, manifest: Manifest) -> None:
    expected = sorted(
        [r.pf_rdma for r in manifest.rails]
        + [v.rdma for r in manifest.rails for v in r.vfs]
    )
    assert RecordingRdmaOps(tmp_path).devices() == expected
    assert RecordingRdmaOps(tmp_path).netns_mode() == "exclusive"


def test_netns_mode_is_settable_and_unsupported_means_no_rdma(
    tmp_path: Path, manifest: Manifest
) -> None:
    rdma = RecordingRdmaOps(tmp_path)
    set_netns_mode(tmp_path, "shared")
    assert rdma.netns_mode() == "shared"
    set_netns_mode(tmp_path, "unsupported")
    with pytest.raises(NotSupported):
        rdma.netns_mode()
    with pytest.raises(NotSupported):
        rdma.devices()


def test_move_in_shared_mode_is_refused(tmp_path: Path, manifest: Manifest) -> None:
    set_netns_mode(tmp_path, "shared")
    with pytest.raises(NotSupported):
        RecordingRdmaOps(tmp_path).move(manifest.rails[0].vfs[0].rdma, None)


def test_move_to_a_missing_netns_is_netns_not_found(
    tmp_path: Path, manifest: Manifest
) -> None:
    dev = manifest.rails[0].vfs[0].rdma
    with pytest.raises(NetnsNotFound):
        RecordingRdmaOps(tmp_path).move(dev, str(tmp_path / "no-such-netns"))
    with pytest.raises(DeviceNotFound):
        RecordingRdmaOps(tmp_path).move("mlx5_99", None)
    assert read_state(tmp_path)["rdma"][dev]["netns"] is None


def test_renumber_rdma_renames_the_device_in_state_and_tree(
    tmp_path: Path, manifest: Manifest
) -> None:
    vf = manifest.rails[1].vfs[0]
    tree = PciTree(tmp_path / "sys")
    tree.rdma(vf.pci, vf.rdma)
    RecordingRdmaOps(tmp_path).move(vf.rdma, None)
    assert renumber_rdma(tmp_path, vf.pci, "mlx5_104") == vf.rdma
    devices = read_state(tmp_path)["rdma"]
    assert vf.rdma not in devices
    assert devices["mlx5_104"] == {"pci": vf.pci, "netns": None}
    assert RecordingRdmaOps(tmp_path).devices().count("mlx5_104") == 1
    assert sorted(p.name for p in (tree.device(vf.pci) / "infiniband").iterdir()) == [
        "mlx5_104"
    ]


def test_renumber_rdma_refuses_an_unknown_function_or_a_taken_name(
    tmp_path: Path, manifest: Manifest
) -> None:
    vf0, vf1 = manifest.rails[0].vfs
    with pytest.raises(DeviceNotFound):
        renumber_rdma(tmp_path, "0000:ff:00.2", "mlx5_9")
    with pytest.raises(ValueError, match="taken"):
        renumber_rdma(tmp_path, vf0.pci, vf1.rdma)
    with pytest.raises(ValueError, match="bad RDMA device name"):
        renumber_rdma(tmp_path, vf0.pci, "a/b")
    assert read_state(tmp_path)["rdma"][vf0.rdma]["pci"] == vf0.pci
