# SPDX-License-Identifier: Apache-2.0
"""An ADD stopped between the move into the pod and the rename there.

Found by the SIGKILL tests (tests/integration/sriov/test_sriov_kill.py): the
VF sat in the pod under its host name, DEL looked for it only under the pod
name, found nothing, and reported success with the VF left in the pod. Here
the stop is reproduced on the fake kernel by making every later rename and
move fail, so neither the ADD's rollback nor anything else touches the VF.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cni.errors import CniError
from tests.unit.cni.attach.node import Node


@pytest.fixture
def node(state_root: Path) -> Node:
    return Node(state_root)


def test_del_brings_home_a_vf_left_in_the_pod_under_its_host_name(
    node: Node,
) -> None:
    pod = node.pod()
    vf = node.roce.vfs[0]
    conf = node.sriov_conf(vf)
    was = node.snapshot(vf)
    node.kernel.fail("rename", times=None)
    node.kernel.fail("move", times=None, when=pod)
    with pytest.raises(CniError) as info:
        node.add(conf, pod)
    assert "moving" in info.value.msg, info.value
    node.kernel.clear_faults()
    assert node.kernel.link(pod, vf.netdev) is not None  # the stopped state
    assert node.records() != []  # kept for DEL: the undo failed
    node.delete(conf, pod)
    assert node.kernel.link_names(pod) == ["eth0"]
    assert node.snapshot(vf) == was
    assert node.records() == []
