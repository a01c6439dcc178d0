# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the simulated-host tests: small labs, torn down even on failure."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from railyard_sim.lab import Lab


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    """One RoCE rail and one IB rail, two VFs each."""
    with Lab.up(tmp_path / "lab", rails=1, vfs_per_pf=2, ib_rails=1) as built:
        yield built


@pytest.fixture
def other_netns(make_netns: Callable[..., str]) -> Callable[[], str]:
    """Namespaces named rm<hex>: this suite's own prefix, never a lab's rs<id>."""
    return lambda: make_netns("rm")
