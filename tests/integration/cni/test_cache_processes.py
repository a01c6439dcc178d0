# SPDX-License-Identifier: Apache-2.0
"""cni.state.cache: atomic 0600 records, load/delete/list for DEL and GC: the tests
that write from forked processes.

The rest of them, in-process, are in tests/unit/cni/core/test_cache.py (the unit tier).
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from cni.state.cache import StateCache

pytestmark = pytest.mark.integration


def _hammer(dir_: str, n: int) -> None:
    c = StateCache(dir_, "sriov")
    for i in range(n):
        c.save("c1", "net1", {"writer": os.getpid(), "i": i, "pad": "x" * 4096})


def test_concurrent_writers_never_expose_a_partial_record(tmp_path):
    # Readers must always see a complete JSON document (rename is atomic).
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), 40)) for _ in range(2)]
    cache = StateCache(tmp_path, "sriov")
    cache.save("c1", "net1", {"i": -1})
    for p in procs:
        p.start()
    seen = 0
    while any(p.is_alive() for p in procs):
        data = cache.load("c1", "net1")  # raises CniError if ever truncated
        assert data is not None and data["containerID"] == "c1"
        seen += 1
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert seen > 0
    assert [n for n in os.listdir(cache.dir) if n.endswith(".tmp")] == []
