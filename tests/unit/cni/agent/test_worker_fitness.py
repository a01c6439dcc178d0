# SPDX-License-Identifier: Apache-2.0
"""When a pooled worker of the agent may serve another request (``WorkerState``)."""

from __future__ import annotations

import os
import threading
import time

from cni.agent.server import WorkerState

BASE = WorkerState(fds=12, threads=frozenset({"MainThread"}), netns=4026531840)


def test_the_same_state_lets_the_worker_serve_again() -> None:
    assert BASE.differs(WorkerState(12, frozenset({"MainThread"}), 4026531840)) == ""


def test_fewer_descriptors_or_threads_are_no_reason_to_leave() -> None:
    assert BASE.differs(WorkerState(10, frozenset(), 4026531840)) == ""


def test_a_main_thread_left_in_another_netns_is_named_first() -> None:
    after = WorkerState(13, frozenset({"MainThread", "x"}), 4026532000)
    assert BASE.differs(after) == "its main thread is in another netns"


def test_descriptors_kept_open_are_counted() -> None:
    after = WorkerState(14, frozenset({"MainThread"}), 4026531840)
    assert BASE.differs(after) == "it holds 2 more file descriptor(s)"


def test_now_waits_a_little_for_a_thread_on_its_way_out() -> None:
    finishing = threading.Thread(target=time.sleep, args=(0.02,), name="closing")
    finishing.start()
    state = WorkerState.now(known=frozenset({threading.current_thread().name}))
    assert "closing" not in state.threads
    assert state.fds == len(os.listdir("/proc/self/fd"))
    assert state.netns == os.stat("/proc/thread-self/ns/net").st_ino
