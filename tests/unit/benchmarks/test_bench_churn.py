# SPDX-License-Identifier: Apache-2.0
"""The churn benchmark's arithmetic and its "node left clean" checks.

What it reports is only as good as these: a percentile that is a sample that
happened, pod slots that never share a VF, and leftover checks that see a
record or a lease (and not the lock files that stay by design).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from bench_churn import Summary, Tally, percentile, slot_vfs  # noqa: E402
from benchlab import RAILS, host_local_leftovers, record_leftovers  # noqa: E402


def test_percentiles_are_nearest_rank_samples() -> None:
    samples = [float(x) for x in range(100, 0, -1)]  # 100 .. 1, unordered
    assert percentile(samples, 50) == 50.0
    assert percentile(samples, 99) == 99.0
    assert percentile(samples, 100) == 100.0
    # Few cycles: p99 is the slowest one, not an interpolation past it.
    assert percentile([0.1, 0.3, 0.2], 99) == 0.3
    assert percentile([0.4], 50) == 0.4


@pytest.mark.parametrize("q", [0, -1, 100.5])
def test_a_percentile_outside_0_100_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="not in"):
        percentile([1.0], q)


def test_no_samples_is_no_summary_and_not_a_crash() -> None:
    assert Summary.of([]) is None
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)


def test_a_summary_renders_p50_p99_max_in_ms() -> None:
    summary = Summary.of([0.010, 0.020, 0.030, 0.500])
    assert summary == Summary(4, 0.020, 0.500, 0.500)
    assert summary.render() == "20 / 500 / 500"


def test_rounds_pool_into_one_tally_and_its_rate() -> None:
    total = Tally()
    total.merge(Tally(adds=[0.1, 0.2], dels=[0.1], wall=2.0))
    total.merge(Tally(adds=[0.3], errors=["ADD x: boom"], wall=1.0, left=["netns"]))
    assert total.adds == [0.1, 0.2, 0.3]
    assert total.pods_per_second == pytest.approx(1.0)
    assert total.errors == ["ADD x: boom"] and total.left == ["netns"]
    assert Tally().pods_per_second == 0.0


def test_pods_in_flight_never_share_a_vf_and_spread_over_the_rails() -> None:
    slots = [slot_vfs(s, 2) for s in range(8)]
    used = [vf for slot in slots for vf in slot]
    assert len(used) == len(set(used)) == 16
    assert {rail for rail, _ in used} == set(range(1, RAILS + 1))
    assert slot_vfs(3, 2) == [(7, 3), (8, 3)]


def test_records_are_leftovers_lock_files_are_not(tmp_path: Path) -> None:
    assert record_leftovers(tmp_path / "none") == []
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "0000:3b:02.1.json").write_text("")
    (tmp_path / "locks" / "pf-0000:3b:00.0").write_text("")
    assert record_leftovers(tmp_path) == []
    (tmp_path / "sriov").mkdir()
    (tmp_path / "sriov" / "cid-net1.json").write_text("{}")
    assert record_leftovers(tmp_path) == ["record sriov/cid-net1.json"]


def test_host_local_leases_are_leftovers_its_bookkeeping_is_not(
    tmp_path: Path,
) -> None:
    assert host_local_leftovers(tmp_path / "none") == []
    net = tmp_path / "gpu1-debian"
    net.mkdir()
    (net / "lock").write_text("")
    (net / "last_reserved_ip.0").write_text("10.1.0.9")
    assert host_local_leftovers(tmp_path) == []
    (net / "10.1.0.9").write_text("cid\nnet1")
    assert host_local_leftovers(tmp_path) == ["host-local lease gpu1-debian/10.1.0.9"]
