# SPDX-License-Identifier: Apache-2.0
"""When a pooled worker of the agent may serve another request (``WorkerState``): the
tests that run a worker process.

The rest of them, in-process, are in tests/unit/cni/agent/test_worker_fitness.py (the
unit tier).
"""

from __future__ import annotations

import threading
import time

import pytest

from cni.agent.server import WorkerState
from tests.unit.cni.agent.test_worker_fitness import BASE

pytestmark = pytest.mark.integration


def test_threads_left_running_are_named() -> None:
    after = WorkerState(12, frozenset({"MainThread", "probe", "ahead"}), 4026531840)
    assert BASE.differs(after) == "it runs more threads: ahead, probe"


def test_now_does_not_wait_past_its_settle_time_for_a_thread_that_stays() -> None:
    stop = threading.Event()
    staying = threading.Thread(target=stop.wait, name="staying")
    staying.start()
    try:
        t0 = time.monotonic()
        state = WorkerState.now(known=frozenset(), settle=0.05)
        assert time.monotonic() - t0 < 1.0
        assert "staying" in state.threads
    finally:
        stop.set()
        staying.join()
