# SPDX-License-Identifier: Apache-2.0
"""An ADD killed while writing its first record leaves no file behind DEL.

Found by the SIGKILL tests (tests/integration/sriov/test_sriov_kill.py): the
writer died between creating the record's temp file and renaming it, so no
record existed; DEL found none, released by (container ID, ifname) and
returned, and the dead writer's temp file stayed in the state dir for ever.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.unit.cni.attach.conftest import state_root  # noqa: F401
from tests.unit.cni.attach.node import Node

pytestmark = pytest.mark.integration


@pytest.fixture
def node(state_root: Path) -> Node:  # noqa: F811 - the fixture imported above
    return Node(state_root)


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_del_without_a_record_sweeps_a_dead_writers_temp_file(node: Node) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    conf = node.sriov_conf(vf)
    records = node.state_dir / "sriov"
    records.mkdir(parents=True)
    left = records / f".c1-net1.json.{dead_pid()}-0123456789ab.tmp"
    left.write_text('{"containerID": "c1", "ifna')  # cut off mid-write
    node.delete(conf, pod, container_id="c1")
    assert node.records() == []
