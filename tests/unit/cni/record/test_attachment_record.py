# SPDX-License-Identifier: Apache-2.0
"""One typed record per (container ID, ifname), read from every form on disk.

The old forms are the files release 0.1.0 wrote (tests/fixtures/state-0.1.0)
and the ones written by hand in the plugins' tests; a node upgraded with pods
attached must read them all, and write them back unchanged.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cni.errors import IO_FAILURE, CniError
from cni.record.sections import IbSection, RdmaSection
from cni.record.store import AttachmentRecords
from cni.record.vf import Stage
from cni.state.cache import StateCache

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "state-0.1.0" / "state"
# Written by the cache around a section; not the section's own keys.
BOOKKEEPING = {"containerID", "ifname", "network", "plugin"}


@pytest.fixture
def old_node(tmp_path: Path) -> AttachmentRecords:
    """The state dir of a node that ran release 0.1.0, pods attached."""
    shutil.copytree(FIXTURE, tmp_path / "state")
    return AttachmentRecords(tmp_path / "state")


def on_disk(path: Path) -> dict[str, object]:
    raw = json.loads(path.read_text())
    return {k: v for k, v in raw.items() if k not in BOOKKEEPING}


def test_an_old_node_lists_every_attachment_with_the_parts_it_had(
    old_node: AttachmentRecords,
) -> None:
    parts = {
        (a.container_id, a.ifname): (a.vf_plugin, a.ib is not None, a.rdma is not None)
        for a in old_node.all()
    }
    assert parts == {
        ("old-chain", "net1"): ("sriov", False, True),
        ("old-ib", "net1"): ("ib-sriov", True, False),
        ("old-sriov", "net1"): ("sriov", False, False),
    }
    assert all(a.vf and a.vf.stage is Stage.ADDRESSES_RECORDED for a in old_node.all())


def test_an_old_guid_record_loads_into_the_ib_section(
    old_node: AttachmentRecords,
) -> None:
    assert old_node.load_ib("old-ib", "net1") == IbSection(
        pci="0000:20:00.2",
        pf="rsa8e1p2",
        vf_index=0,
        pf_pci="0000:20:00.0",
        orig_node_guid="02:c9:a8:e1:02:00:00:00",
        orig_port_guid="02:c9:a8:e1:02:00:00:00",
        guid="02:00:00:00:00:00:00:11",
        pkey="",
        host_ifname="rsa8e1r2v0",
        dpdk=False,
        rdma=True,
        network="ib2",
    )


def test_an_old_rdma_record_with_rdma_cni_keys_loads_into_the_rdma_section(
    old_node: AttachmentRecords,
) -> None:
    assert old_node.load_rdma("old-chain", "net1") == RdmaSection(
        device_id="0000:10:00.3",
        container_dev="mlx5_3",
        sandbox_dev="mlx5_3",
        netns="/var/run/netns/rsa8e1-pod2",
        version="1.0",
        network="gpu1-sriov",
    )


def test_old_sections_are_written_back_with_the_keys_they_were_read_with(
    old_node: AttachmentRecords, tmp_path: Path
) -> None:
    ib = old_node.load_ib("old-ib", "net1")
    rdma = old_node.load_rdma("old-chain", "net1")
    assert ib is not None and rdma is not None
    new = AttachmentRecords(tmp_path / "new")
    new.save_ib("old-ib", "net1", ib)
    new.save_rdma("old-chain", "net1", rdma)
    for part in ("ib-sriov-guid/old-ib-net1.json", "rdma/old-chain-net1.json"):
        assert on_disk(tmp_path / "new" / part) == on_disk(FIXTURE / part)
        assert (
            json.loads((tmp_path / "new" / part).read_text())["network"]
            == (json.loads((FIXTURE / part).read_text())["network"])
        )


def test_a_guid_record_without_the_later_keys_loads_with_their_defaults(
    tmp_path: Path,
) -> None:
    # The shape an ADD wrote before pf_pci and pkey were recorded.
    StateCache(tmp_path, "ib-sriov-guid").save(
        "c1",
        "net1",
        {"pci": "0000:3b:00.3", "pf": "ib0", "vf_index": 1, "guid": "02:00"},
    )
    ib = AttachmentRecords(tmp_path).load_ib("c1", "net1")
    assert ib == IbSection(pci="0000:3b:00.3", pf="ib0", vf_index=1, guid="02:00")


def test_a_vf_record_that_only_names_its_vf_still_gives_its_pci(
    tmp_path: Path,
) -> None:
    StateCache(tmp_path, "ib-sriov").save("c1", "net1", {"pci": "0000:3b:00.2"})
    st = AttachmentRecords(tmp_path).any_vf("c1", "net1")
    assert st is not None
    assert (st.container_id, st.ifname, st.pci, st.stage) == (
        "c1",
        "net1",
        "0000:3b:00.2",
        Stage.NEW,
    )


def test_sections_round_trip_every_field(tmp_path: Path) -> None:
    records = AttachmentRecords(tmp_path)
    ib = IbSection(
        pci="0000:3b:00.3",
        pf="ib0",
        vf_index=1,
        pf_pci="0000:3b:00.0",
        orig_node_guid="02:c9:00:00:00:00:00:01",
        orig_port_guid="02:c9:00:00:00:00:00:02",
        guid="02:00:00:00:00:00:00:11",
        pkey="0x8001",
        host_ifname="ib3",
        dpdk=True,
        rdma=True,
        network="ib-net",
    )
    rdma = RdmaSection(
        device_id="0000:3b:00.3",
        container_dev="mlx5_4",
        sandbox_dev="mlx5_3",
        netns="/run/netns/p",
        version="1.0",
        network="ib-net",
    )
    records.save_ib("c1", "net1", ib)
    records.save_rdma("c1", "net1", rdma)
    assert records.load_ib("c1", "net1") == ib
    assert records.load_rdma("c1", "net1") == rdma
    [att] = records.all()
    assert (att.ib, att.rdma, att.vf) == (ib, rdma, None)


def test_each_part_goes_on_its_own_so_either_delete_order_works(
    old_node: AttachmentRecords,
) -> None:
    # rdma chained after sriov: whichever DEL runs first, the other part stays.
    old_node.vf("sriov").delete("old-chain", "net1")
    assert old_node.load_rdma("old-chain", "net1") is not None
    old_node.delete_rdma("old-chain", "net1")
    assert ("old-chain", "net1") not in {
        (a.container_id, a.ifname) for a in old_node.all()
    }
    # ib-sriov: the IB section outlives the VF part until the GUID is back.
    old_node.vf("ib-sriov").delete("old-ib", "net1")
    [ib_only] = [a for a in old_node.all() if a.container_id == "old-ib"]
    assert ib_only.vf is None and ib_only.ib is not None


def test_a_part_that_does_not_decode_is_reported_by_load_and_skipped_by_all(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    guid = StateCache(tmp_path, "ib-sriov-guid")
    guid.save("c1", "net1", {"pci": "0000:3b:00.3"})
    records = AttachmentRecords(tmp_path)
    with pytest.raises(CniError) as err:
        records.load_ib("c1", "net1")
    assert err.value.code == IO_FAILURE
    assert records.all() == []
    assert records.all_ib() == []
    # GC goes on past it, and the log says which file it left alone.
    assert str(guid.path("c1", "net1")) in caplog.text


def test_an_unreadable_vf_record_is_logged_and_the_others_still_listed(
    old_node: AttachmentRecords, caplog: pytest.LogCaptureFixture
) -> None:
    vf = old_node.vf("sriov")
    broken = vf.cache.path("torn", "net1")
    broken.write_text('{"containerID": "torn", "ifn')  # a write cut short
    foreign = vf.cache.path("other", "net1")
    foreign.write_text('{"containerID": "other", "ifname": "net1", "routes": [1]}')
    listed = {st.container_id for st in vf.all()}
    assert listed == {"old-chain", "old-sriov"}
    assert f"skipping state record {broken}: unreadable" in caplog.text
    assert str(foreign) in caplog.text
    # Listed again (the exporter does at every scrape): not logged again.
    caplog.clear()
    assert {st.container_id for st in vf.all()} == listed
    assert caplog.text == ""


def test_the_ib_sections_are_listed_without_the_other_parts(
    old_node: AttachmentRecords,
) -> None:
    assert [(cid, ifname, ib.pci) for cid, ifname, ib in old_node.all_ib()] == [
        ("old-ib", "net1", "0000:20:00.2")
    ]
