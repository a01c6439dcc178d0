# SPDX-License-Identifier: Apache-2.0
"""VF records written by release 0.1.0 (tests/fixtures/state-0.1.0) read back.

The kernel-tier test (tests/integration/upgrade) DELs them on a lab; this one
pins, without root, that every field of the old files survives a load and a
save unchanged, stage included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cni.record.vf import Stage, VfState, read_stage

STATE = Path(__file__).resolve().parents[2] / "fixtures" / "state-0.1.0" / "state"
VF_RECORDS = sorted([*STATE.glob("sriov/*.json"), *STATE.glob("ib-sriov/*.json")])
# Written by the cache around our record; not VfState fields.
BOOKKEEPING = {"containerID", "plugin", "schema"}


def test_the_fixture_holds_a_vf_record_of_each_vf_plugin() -> None:
    assert {p.parent.name for p in VF_RECORDS} == {"sriov", "ib-sriov"}


@pytest.mark.parametrize("path", VF_RECORDS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_an_old_record_loads_and_saves_unchanged(path: Path) -> None:
    raw = json.loads(path.read_text())
    st = VfState.from_json(raw)
    assert st.stage is Stage.ADDRESSES_RECORDED and not st.stage.vf_home
    assert st.container_id == raw["containerID"]
    again = st.to_json()
    assert {k: v for k, v in raw.items() if k not in BOOKKEEPING} == {
        k: v for k, v in again.items() if k not in BOOKKEEPING
    }


def test_every_stage_an_old_release_wrote_reads_back() -> None:
    old = {"new", "saved", "attached", "moved", "addressed", "del-failed"}
    old |= {"awaiting-vf", "restored", "release-pending"}
    read = {value: read_stage(value) for value in old}
    # 0.1.0 defined "attached" but never saved it: read as the stage written instead.
    assert read["attached"] is Stage.ADDRESSES_RECORDED
    assert {s.value for s in Stage} == old - {"attached"}
    assert {s for s in Stage if s.vf_home} == {Stage.VF_HOME, Stage.RELEASE_PENDING}
