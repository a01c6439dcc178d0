# SPDX-License-Identifier: Apache-2.0
"""Temp files never outlive the process that made them.

A plugin SIGKILLed between creating a record's temp file and renaming it
cannot clean up; the next save or delete of that record removes temp files
whose writer is dead, and leaves a live writer's alone. An allocation
marker's temp file goes with the marker, or with a claim that failed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cni.attach.allocation import Allocations
from cni.errors import CniError


class _Namespaces:
    def exists(self, path: str) -> bool:
        return False


def test_a_failed_claim_leaves_no_temp_marker(tmp_path: Path):
    allocations = Allocations(tmp_path)
    with pytest.raises(CniError) as info:
        allocations.claim("0000:af:00.2", "/run/netns/\udcff", _Namespaces())  # type: ignore[arg-type]
    assert info.value.code == 5
    assert list(allocations.dir.iterdir()) == []


def test_release_removes_a_killed_claims_temp_marker(tmp_path: Path):
    allocations = Allocations(tmp_path)
    allocations.claim("0000:af:00.2", "/run/netns/p", _Namespaces())  # type: ignore[arg-type]
    (allocations.dir / ".0000:af:00.2.tmp").write_text("/run/netns/q")
    allocations.release("0000:af:00.2")
    assert list(allocations.dir.iterdir()) == []
