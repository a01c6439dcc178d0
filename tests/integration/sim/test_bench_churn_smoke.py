# SPDX-License-Identifier: Apache-2.0
"""benchmarks/bench_churn.py, for a second per column: it churns, counts and
finds the node clean, on the warm path and the Go chain alike."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from bench_churn import run  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.mark.skipif(
    shutil.which("host-device", path="/usr/lib/cni") is None,
    reason="Debian's containernetworking-plugins are not installed",
)
def test_a_short_churn_attaches_pods_and_leaves_nothing_behind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    totals = run(["warm", "go"], pods=3, nics=2, concurrency=2, duration=1.0, rounds=1)
    for name, tally in totals.items():
        assert tally.adds and tally.dels, name
        assert tally.errors == [], name
        assert tally.left == [], name
        assert tally.pods_per_second > 0, name
    out = capsys.readouterr().out
    assert "ADD p50/p99/max ms" in out and "\nwarm " in out and "\ngo " in out
