# SPDX-License-Identifier: Apache-2.0
"""The demo's conflists are shaped like Spiderpool's rendered ones: the tests that
exec a lab launcher.

The rest of them, in-process, are in tests/unit/sim/test_sim_conflist.py (the unit
tier).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from railyard_sim.runtime import plugin_bin_dir

pytestmark = pytest.mark.integration


def test_a_launcher_answers_version_without_a_lab_dependency(tmp_path: Path) -> None:
    bins = plugin_bin_dir(tmp_path)
    proc = subprocess.run(
        [str(bins / "rdma")],
        input=b"{}",
        env={"CNI_COMMAND": "VERSION"},
        capture_output=True,
        check=True,
    )
    assert json.loads(proc.stdout)["cniVersion"]
