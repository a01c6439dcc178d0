# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the lifecycle's unit tests on the fake kernel."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SHM = Path("/dev/shm")


@pytest.fixture
def state_root(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory for a node's state dir, on tmpfs when there is one.

    The records are fsynced on every save; these tests pin the lifecycle, not
    durability (tests/unit/cni/core/test_cache.py does), and hundreds of
    matrix cases on a disk-backed tmp would spend most of their time in fsync.
    """
    if not (SHM.is_dir() and os.access(SHM, os.W_OK | os.X_OK)):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(prefix="ry-unit-", dir=SHM) as tmp:
        yield Path(tmp)
