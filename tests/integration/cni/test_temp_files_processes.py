# SPDX-License-Identifier: Apache-2.0
"""Temp files never outlive the process that made them: the tests that kill writer
processes.

The rest of them, in-process, are in tests/unit/cni/core/test_temp_files.py (the unit
tier).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cni.state.cache import StateCache

pytestmark = pytest.mark.integration


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_killed_writers_temp_file_is_swept_by_the_next_delete(tmp_path: Path):
    cache = StateCache(tmp_path, "sriov")
    cache.save("c1", "net1", {"pci": "0000:af:00.2"})
    name = cache.path("c1", "net1").name
    dead = cache.dir / f".{name}.{dead_pid()}-aaaaaaaaaaaa.tmp"
    live = cache.dir / f".{name}.{os.getppid()}-bbbbbbbbbbbb.tmp"
    other = cache.dir / f".other-net1.json.{dead_pid()}-cccccccccccc.tmp"
    for p in (dead, live, other):
        p.write_text("{")
    assert cache.delete("c1", "net1")
    assert not dead.exists()
    assert live.exists()  # its writer may still rename it
    assert other.exists()  # another record's, swept by that record's commands


def test_save_sweeps_too_and_names_temps_with_the_writer_pid(tmp_path: Path):
    cache = StateCache(tmp_path, "sriov")
    cache.dir.mkdir(parents=True)
    name = cache.path("c1", "net1").name
    dead = cache.dir / f".{name}.{dead_pid()}-aaaaaaaaaaaa.tmp"
    dead.write_text("{")
    cache.save("c1", "net1", {"pci": "0000:af:00.2"})
    assert sorted(p.name for p in cache.dir.iterdir()) == [name]
