# SPDX-License-Identifier: Apache-2.0
"""Attach latency: the steps a request records, the sample a worker sends,
and the histograms the agent's /metrics shows (buckets 1 ms to 30 s, labels
plugin / command / result and plugin / command / step)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from cni import timings
from cni.agent.metrics import BUCKETS, AttachMetrics, Sample


@pytest.fixture(autouse=True)
def no_recording_left():
    yield
    timings.finish()


def test_steps_are_recorded_only_inside_a_started_request() -> None:
    with timings.step(timings.MOVE):
        pass
    assert timings.finish() == []
    timings.start()
    with timings.step(timings.MOVE):
        pass
    with pytest.raises(OSError), timings.step(timings.ADDRESSES):
        raise OSError("a failed step is timed too")
    recorded = timings.finish()
    assert [name for name, _ in recorded] == [timings.MOVE, timings.ADDRESSES]
    assert all(seconds >= 0 for _, seconds in recorded)
    assert timings.finish() == []  # finish stops recording


def test_a_sample_is_the_command_its_result_and_the_recorded_steps() -> None:
    timings.start()
    with timings.step(timings.IPAM):
        pass
    sample = Sample.of("sriov", "ADD", 0, 0.042)
    assert (sample.plugin, sample.command, sample.result) == ("sriov", "ADD", "success")
    assert [name for name, _ in sample.steps] == [timings.IPAM]
    failed = Sample.of("sriov", "DEL", 1, 0.1)
    assert failed.result == "error" and failed.steps == []
    # The environment is the caller's: a made-up command stays one label value.
    assert Sample.of("sriov", "$(reboot)", 4, 0.0).command == "other"


def test_a_sample_goes_over_the_wire_and_back_unchanged() -> None:
    sample = Sample("rdma", "ADD", "success", 0.25, [("move", 0.01), ("ipam", 0.2)])
    assert Sample.decode(sample.encode()) == sample
    assert len(sample.encode()) < 200


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"[]", b'{"p": "x"}', b'{"p":"x","c":"ADD","r":"ok","d":"x","s":[]}'],
)
def test_what_is_not_a_sample_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a sample"):
        Sample.decode(data)


def test_the_buckets_resolve_1_ms_to_30_s() -> None:
    assert BUCKETS[0] == 0.001 and BUCKETS[-1] == 30.0
    assert list(BUCKETS) == sorted(BUCKETS)
    # 1-2-5 steps (10 -> 30 s at the end): a bucket at most 3x the one before.
    assert all(b / a <= 3 for a, b in zip(BUCKETS, BUCKETS[1:], strict=False))


def test_a_sample_lands_in_the_command_and_step_histograms() -> None:
    registry = CollectorRegistry()
    metrics = AttachMetrics(registry, "node-a")
    metrics.observe(
        Sample(
            "sriov",
            "ADD",
            "success",
            0.0453,
            [("move", 0.0141), ("record_write", 0.0016), ("record_write", 0.0019)],
        )
    )
    metrics.observe(Sample("sriov", "ADD", "error", 31.0))
    command = "railyard_cni_command_duration_seconds"
    ok = {
        "node_name": "node-a",
        "plugin": "sriov",
        "command": "ADD",
        "result": "success",
    }
    bucket = f"{command}_bucket"
    assert registry.get_sample_value(bucket, {**ok, "le": "0.02"}) == 0.0
    assert registry.get_sample_value(bucket, {**ok, "le": "0.05"}) == 1.0
    assert registry.get_sample_value(f"{command}_sum", ok) == pytest.approx(0.0453)
    failed = {
        "node_name": "node-a",
        "plugin": "sriov",
        "command": "ADD",
        "result": "error",
    }
    # Past the last bucket (a command the runtime gave up on) is still counted.
    assert registry.get_sample_value(bucket, {**failed, "le": "30.0"}) == 0.0
    assert registry.get_sample_value(bucket, {**failed, "le": "+Inf"}) == 1.0

    step = "railyard_cni_step_duration_seconds"
    move = {"node_name": "node-a", "plugin": "sriov", "command": "ADD", "step": "move"}
    assert registry.get_sample_value(f"{step}_bucket", {**move, "le": "0.01"}) == 0.0
    assert registry.get_sample_value(f"{step}_bucket", {**move, "le": "0.02"}) == 1.0
    writes = {
        "node_name": "node-a",
        "plugin": "sriov",
        "command": "ADD",
        "step": "record_write",
    }
    assert registry.get_sample_value(f"{step}_count", writes) == 2.0
    assert registry.get_sample_value(f"{step}_bucket", {**writes, "le": "0.002"}) == 2


def test_a_step_name_outside_the_known_set_is_not_a_label_value() -> None:
    registry = CollectorRegistry()
    AttachMetrics(registry, "node-a").observe(
        Sample("sriov", "ADD", "success", 0.01, [("anything", 0.001)])
    )
    step = "railyard_cni_step_duration_seconds_count"
    labels = {
        "node_name": "node-a",
        "plugin": "sriov",
        "command": "ADD",
        "step": "anything",
    }
    assert registry.get_sample_value(step, labels) is None
    assert set(timings.STEPS) == {
        "pf_settings", "move", "addresses", "routes", "detection", "ipam",
        "record_write",
    }  # fmt: skip
