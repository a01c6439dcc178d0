# SPDX-License-Identifier: Apache-2.0
"""An IPAM that was never reached leaves nothing behind (issue 10, last row).

ipamd unreachable, a delegated IPAM missing from CNI_PATH, a path-like
``ipam.type``: the allocation never happened, so the ADD's rollback must not
keep a record for a release that can never succeed (GC would retry it
forever); the runtime's DEL after it succeeds. An IPAM that may have
allocated (a timed-out call) still keeps its release, as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cni.errors import INVALID_CONFIG, IPAM_ERROR, TRY_AGAIN_LATER, CniError
from cni.ipam import IpamError
from cni.ipam.delegate import DelegateIpam
from tests.unit.cni.attach.node import Node


@pytest.fixture
def node(state_root: Path) -> Node:
    return Node(state_root)


@pytest.mark.parametrize(
    "error",
    [
        IpamError(TRY_AGAIN_LATER, "ipamd is not reachable (allocate)", unchanged=True),
        IpamError(IPAM_ERROR, 'failed to find plugin "dhcp"', unchanged=True),
    ],
    ids=["ipamd-unreachable", "delegate-missing"],
)
def test_add_with_an_ipam_never_reached_leaves_no_record(
    node: Node, error: IpamError
) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    node.ipam.fail_allocate = error
    node.ipam.fail_release = error  # what the old rollback tripped over
    with pytest.raises(CniError) as info:
        node.add(node.sriov_conf(), pod)
    assert info.value.code == error.code
    assert not getattr(info.value, "__notes__", [])  # every undo worked
    assert node.records() == []
    assert node.snapshot(vf) == was
    node.delete(node.sriov_conf(), pod)  # the runtime's DEL: nothing to do
    assert node.records() == []


def test_add_whose_allocate_may_have_happened_keeps_its_release(node: Node) -> None:
    """A call that timed out may have allocated: the release stays pending."""
    pod = node.pod()
    err = IpamError(TRY_AGAIN_LATER, "ipamd is not reachable (allocate)")
    node.ipam.fail_allocate = err
    node.ipam.fail_release = err
    with pytest.raises(CniError) as info:
        node.add(node.sriov_conf(), pod)
    notes = getattr(info.value, "__notes__", [])
    assert any("rollback incomplete" in n for n in notes), notes
    assert node.records() != []  # GC or DEL finishes the release


@pytest.mark.parametrize("kind", ["../../../bin/true", "/bin/true", ".", "a b"])
def test_a_path_like_ipam_type_is_refused_before_any_change(
    node: Node, kind: str
) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    conf = node.sriov_conf()
    conf["ipam"]["type"] = kind
    with pytest.raises(CniError) as info:
        node.add(conf, pod)
    assert info.value.code == INVALID_CONFIG
    assert node.kernel.journal == []
    assert node.snapshot(vf) == was
    assert node.records() == []


def test_delegate_missing_from_cni_path_is_unchanged(tmp_path: Path) -> None:
    ipam = DelegateIpam({"ipam": {"type": "dhcp"}}, {"CNI_PATH": str(tmp_path)})
    with pytest.raises(IpamError) as info:
        ipam.release("n", "c1", "net1")
    assert info.value.unchanged
    assert info.value.code == IPAM_ERROR
