# SPDX-License-Identifier: Apache-2.0
"""The VF record round-trips through the atomic cache with everything DEL needs."""

from __future__ import annotations

from pathlib import Path

from cni.kernel import RouteSpec, RuleSpec, VfInfo
from cni.record.store import AttachmentRecords
from cni.record.vf import PfSettings, Stage, VfState


def full_state() -> VfState:
    return VfState(
        container_id="c1",
        ifname="net1",
        network="gpu1-sriov",
        netns="/var/run/netns/p",
        pci="0000:10:00.2",
        pf="pf0",
        vf_index=0,
        dpdk=True,
        host_ifname="enp16s0v0",
        host_ifindex=7,
        orig_mac="aa:bb:cc:dd:ee:ff",
        orig_mtu=1500,
        orig_vf=VfInfo(vf=0, vlan=3, spoofchk=True, trust=False),
        pf_settings=PfSettings(vlan=10, trust=True),
        pod_mac="02:00:00:00:00:01",
        pod_mtu=4200,
        addresses=["172.16.11.1/24"],
        routes=[RouteSpec("0.0.0.0/0", "172.16.11.254", "net1", 101)],
        rules=[RuleSpec("172.16.11.1/32", 101, 900)],
        table=101,
        ipam_type="spiderpool",
        ipam_conf={"type": "spiderpool", "default_ipv4_ippool": ["gpu1-net11"]},
        rdma_device="mlx5_3",
        extra={"guid": "x"},
        stage=Stage.ADDRESSES_RECORDED,
    )


def test_record_round_trips_every_field(tmp_path: Path) -> None:
    store = AttachmentRecords(tmp_path).vf("sriov")
    st = full_state()
    store.save(st)
    assert store.load("c1", "net1") == st
    assert store.all() == [st]


def test_record_file_is_private(tmp_path: Path) -> None:
    store = AttachmentRecords(tmp_path).vf("sriov")
    store.save(full_state())
    (path,) = (tmp_path / "sriov").glob("*.json")
    assert path.stat().st_mode & 0o777 == 0o600


def test_missing_record_loads_as_none_and_delete_is_idempotent(tmp_path: Path) -> None:
    store = AttachmentRecords(tmp_path).vf("sriov")
    assert store.load("nope", "net1") is None
    store.delete("nope", "net1")
