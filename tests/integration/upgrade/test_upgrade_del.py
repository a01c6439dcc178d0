# SPDX-License-Identifier: Apache-2.0
"""A node upgraded while pods are attached: DEL with this code, records of 0.1.0.

``tests/fixtures/state-0.1.0`` holds the state dir release 0.1.0's own code
wrote for three attachments (sriov alone, a [sriov, rdma] chain, ib-sriov with
a GUID and rdmaIsolation) on a lab with the fixed id a8e1 (see its
generate.py). Here the same lab is rebuilt, the kernel side of the three
attachments is put in place by this code's ADD (behaviour unchanged), and the
state dir is then swapped for the old records (given the live VFs' ifindex
and pod MAC, as a node's own records have them). DEL must follow them: every VF
home under the recorded name with the recorded MAC, MTU and PF settings, the
RDMA devices home, the GUID restored, addresses released, no record left.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cni.plugins.ib_sriov import commands as ib
from cni.plugins.rdma import commands as rdma
from cni.plugins.sriov import commands as sriov
from railyard_sim.lab import Lab, LabError
from railyard_sim.recording import rdma_location
from tests.doubles.sriov_lab import Harness, link, pod_links, vf_table

pytestmark = [pytest.mark.kernel, pytest.mark.integration]

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "state-0.1.0"
CASES = json.loads((FIXTURE / "cases.json").read_text())


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    try:
        lab = Lab.up(
            tmp_path / "lab", rails=1, vfs_per_pf=2, ib_rails=1, lab_id=CASES["lab_id"]
        )
    except LabError as exc:
        pytest.fail(f"cannot rebuild the fixture's lab: {exc}")
    with lab:
        yield Harness(lab, tmp_path)


def old_record(kind: str, cid: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (FIXTURE / "state" / kind / f"{cid}-net1.json").read_text()
    )
    return data


def attach_all(h: Harness) -> list[dict[str, Any]]:
    """This code's ADDs of the fixture's attachments, in the fixture's order."""
    cases = CASES["cases"]
    for case in cases:
        pod = h.pod()
        assert pod == case["netns"]  # same lab id, same order: same names
        args = h.args("ADD", case["conf"], pod, container_id=case["cid"])
        module = ib if case["plugin"] == "ib-sriov" else sriov
        result = h.funcs(module).add(args)
        if case["plugin"] == "sriov+rdma":
            conf = {**case["rdma_conf"], "prevResult": result.to_json()}
            rdma_args = h.args("ADD", conf, pod, container_id=case["cid"])
            h.funcs(rdma).add(rdma_args)
    return list(cases)


#: What ties a record to its kernel object: on the node that wrote the old
#: records they were the live VF's; in this rebuilt lab the kernel gives the
#: VFs other ifindexes and MACs, so they are taken from this code's records.
IDENTITY = ("host_ifindex", "pod_mac")


def swap_in_old_records(h: Harness) -> None:
    live = {
        path.relative_to(h.state_dir): json.loads(path.read_text())
        for path in h.state_dir.glob("*/*.json")
    }
    for entry in h.state_dir.iterdir():
        if entry.name != "locks":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    shutil.copytree(FIXTURE / "state", h.state_dir, dirs_exist_ok=True)
    for rel, now in live.items():
        old = h.state_dir / rel
        if not old.exists():
            continue
        record = json.loads(old.read_text())
        record.update({k: now[k] for k in IDENTITY if k in record and k in now})
        old.write_text(json.dumps(record, indent=1, sort_keys=True))


def test_del_follows_the_records_the_previous_release_wrote(h: Harness) -> None:
    cases = attach_all(h)
    swap_in_old_records(h)
    assert h.state_files()  # the old records are what DEL now finds

    for case in reversed(cases):
        pod, cid = case["netns"], case["cid"]
        if case["plugin"] == "sriov+rdma":
            h.funcs(rdma).del_(h.args("DEL", case["rdma_conf"], pod, container_id=cid))
        module = ib if case["plugin"] == "ib-sriov" else sriov
        h.funcs(module).del_(h.args("DEL", case["conf"], pod, container_id=cid))

    assert h.state_files() == []
    assert h.ipam.held == {}
    for case in cases:
        assert "net1" not in pod_links(case["netns"])
    for cid in ("old-sriov", "old-chain"):
        rec = old_record("sriov", cid)
        host = link(rec["host_ifname"])
        assert host is not None, f"{rec['host_ifname']} not back in the host"
        assert host["address"] == rec["orig_mac"] and host["mtu"] == rec["orig_mtu"]
        table = vf_table(h.lab, rec["pf"], rec["vf_index"])
        for key in ("vlan", "qos", "spoofchk", "trust"):
            assert table[key] == rec["orig_vf"][key], key
    chain = old_record("rdma", "old-chain")
    assert rdma_location(h.lab.dir, chain["containerRdmaDevName"]) is None
    # ib-sriov: the GUID record holds the name before the rebind; the netdev
    # is a new one after each rebind, so its MAC is not the recorded one.
    guid = old_record("ib-sriov-guid", "old-ib")
    assert link(guid["host_ifname"]) is not None
    rail = h.ib_rail(1)
    assert h.guids(rail, rail.vfs[0]) == (
        guid["orig_node_guid"],
        guid["orig_port_guid"],
    )
    ib_rec = old_record("ib-sriov", "old-ib")
    assert rdma_location(h.lab.dir, ib_rec["rdma_device"]) is None
