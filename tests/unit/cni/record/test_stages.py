# SPDX-License-Identifier: Apache-2.0
"""The record's stages: what each says is true on disk, and the moves allowed.

A record holds the stage of its last save; DEL and GC read it (``vf_home``),
so every stage must be one a save writes, and a finished ADD must leave the
stage that says what it did.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cni.record.vf import TRANSITIONS, Stage, VfState
from tests.unit.cni.attach.node import Node


def saved_stage(node: Node) -> Stage:
    st = node.kernel.deps(node.state_dir).records.vf("sriov").load("c1", "net1")
    assert st is not None
    return st.stage


def test_a_finished_add_with_an_ipam_leaves_its_addresses_recorded(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path)
    node.add(node.sriov_conf(), node.pod())
    assert saved_stage(node) is Stage.ADDRESSES_RECORDED


def test_a_finished_add_without_an_ipam_leaves_the_netdev_in_the_pod(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path)
    conf = node.sriov_conf()
    del conf["ipam"]
    node.add(conf, node.pod())
    assert saved_stage(node) is Stage.NETDEV_IN_POD


def test_every_stage_has_its_moves_and_only_vf_home_ones_lead_to_release() -> None:
    assert set(TRANSITIONS) == set(Stage)
    assert TRANSITIONS[Stage.RELEASE_PENDING] == frozenset()
    assert TRANSITIONS[Stage.VF_HOME] == {Stage.RELEASE_PENDING}


@pytest.mark.parametrize(
    ("start", "to"),
    [
        (Stage.ADDRESSES_RECORDED, Stage.ORIGINALS_RECORDED),  # ADD never goes back
        (Stage.VF_HOME, Stage.NETDEV_IN_POD),  # a VF home is not sent out again
        (Stage.RELEASE_PENDING, Stage.VF_HOME),  # only the release is left
    ],
)
def test_a_move_the_table_forbids_is_refused(start: Stage, to: Stage) -> None:
    st = VfState("c1", "net1", "rail1", "/var/run/netns/p", "0000:af:00.2", stage=start)
    with pytest.raises(ValueError, match=f"{start.value} cannot become {to.value}"):
        st.advance(to)
    assert st.stage is start


def test_add_may_skip_a_stage_it_passed_without_saving() -> None:
    # With an IPAM, the move and the addresses are saved together.
    st = VfState("c1", "net1", "rail1", "/var/run/netns/p", "0000:af:00.2")
    for stage in (Stage.ORIGINALS_RECORDED, Stage.ADDRESSES_RECORDED):
        st.advance(stage)
    assert st.stage is Stage.ADDRESSES_RECORDED
