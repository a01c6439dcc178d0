# SPDX-License-Identifier: Apache-2.0
"""The runtime's trace id (``TRACEPARENT``, W3C Trace Context, set by libcni
for every plugin it runs) on every log line of that command."""

from __future__ import annotations

import logging

import pytest

from cni import logs
from cni.skel import PluginFuncs

from .conftest import Recorder, Run, base_env, netconf

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


def test_the_trace_id_is_read_from_a_valid_traceparent() -> None:
    assert logs.trace_id({"TRACEPARENT": TRACEPARENT}) == TRACE
    # A later version may append fields; its first four are read the same.
    assert logs.trace_id({"TRACEPARENT": f"01-{TRACE}-00f067aa0ba902b7-01-xyz"}) == (
        TRACE
    )


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        f"ff-{TRACE}-00f067aa0ba902b7-01",  # version ff is invalid
        f"00-{'0' * 32}-00f067aa0ba902b7-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent id
        f"00-{TRACE.upper()}-00f067aa0ba902b7-01",  # hex is lowercase
        f"00-{TRACE}-00f067aa0ba902b7-01-extra",  # version 00 has four fields
        f"00-{TRACE[:-1]}-00f067aa0ba902b7-01",
    ],
)
def test_an_absent_or_invalid_traceparent_gives_no_trace_id(value: str) -> None:
    assert logs.trace_id({"TRACEPARENT": value}) == ""
    assert logs.trace_id({}) == ""


def logging_funcs(recorder: Recorder) -> PluginFuncs:
    """A plugin whose ADD logs at the start and the end (two lines)."""
    log = logging.getLogger("cni.plugins.test")

    def add(ca):  # type: ignore[no-untyped-def]
        log.info("attaching")
        recorder.calls.append(("add", ca))
        log.warning("attached")

    funcs = recorder.funcs()
    return PluginFuncs(
        add=add, del_=funcs.del_, check=funcs.check, status=funcs.status, gc=funcs.gc
    )


def test_every_line_of_a_traced_command_carries_its_trace_id(
    run_cni, recorder: Recorder
) -> None:
    run: Run = run_cni(
        base_env("ADD", TRACEPARENT=TRACEPARENT),
        netconf(),
        funcs=logging_funcs(recorder),
    )
    lines = run.stderr.splitlines()
    assert len(lines) == 2, run.stderr
    for line in lines:
        assert f"[ADD cid=3f2a8c1d9e00 if=net1 trace={TRACE}]" in line


def test_an_untraced_command_logs_no_trace_field(run_cni, recorder: Recorder) -> None:
    run = run_cni(base_env("ADD"), netconf(), funcs=logging_funcs(recorder))
    assert "attached" in run.stderr and "trace=" not in run.stderr
