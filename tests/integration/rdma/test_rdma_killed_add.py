# SPDX-License-Identifier: Apache-2.0
"""The chained rdma plugin, run in-process through skel with fake RDMA netlink: the
tests that kill an ADD process.

The rest of them, in-process, are in tests/unit/cni/rdma/test_rdma_plugin.py (the unit
tier).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.unit.cni.rdma.test_rdma_plugin import (
    Host,
    conf,
    host,  # noqa: F401
)

pytestmark = pytest.mark.integration


def test_del_without_state_sweeps_the_temp_file_of_a_killed_add(
    host: Host,  # noqa: F811 - the fixture imported above
) -> None:
    # The ADD died between creating its state's temp file and renaming it.
    dead = subprocess.Popen(["true"])
    dead.wait()
    (host.state_dir / "rdma").mkdir(parents=True)
    left = host.state_dir / "rdma" / f".c1-net1.json.{dead.pid}-0123456789ab.tmp"
    left.write_text('{"containerID": "c1"')
    assert host.run("DEL", conf()) == (0, None)
    assert not left.exists()
