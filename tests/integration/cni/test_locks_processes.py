# SPDX-License-Identifier: Apache-2.0
"""cni.state.locks: flock per key across processes, bounded wait, code 11: the tests
that hold locks from other processes.

The rest of them, in-process, are in tests/unit/cni/core/test_locks.py (the unit tier).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cni.errors import CniError
from cni.state.locks import Locks, LockTimeout
from tests.unit.cni.core.test_locks import PCI

pytestmark = pytest.mark.integration


# A second process holding the lock until its stdin closes.
HOLDER = """
import sys
from cni.state.locks import Locks
lock = Locks(sys.argv[1]).lock(sys.argv[2]).acquire()
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path: Path):
    procs: list[subprocess.Popen[str]] = []

    def start(key: str = PCI) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(tmp_path), key],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        assert p.stdout is not None
        assert p.stdout.readline() == "held\n"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_lock_times_out_with_code_11_naming_key_and_holder(tmp_path, holder):
    p = holder()
    start = time.monotonic()
    with pytest.raises(LockTimeout) as e:
        Locks(tmp_path).lock(PCI, timeout=0.3).acquire()
    waited = time.monotonic() - start
    assert 0.3 <= waited < 2.0
    assert isinstance(e.value, CniError)
    assert e.value.code == 11
    assert PCI in e.value.details
    assert f"pid {p.pid}" in e.value.details


def test_lock_is_acquired_once_the_holder_exits(tmp_path, holder):
    p = holder()
    assert p.stdin is not None
    p.stdin.close()  # holder exits; the kernel drops its flock
    with Locks(tmp_path).lock(PCI, timeout=5) as lock:
        assert lock.held


def test_killed_holder_leaves_no_stale_lock(tmp_path, holder):
    p = holder()
    p.kill()
    p.wait()
    with Locks(tmp_path).lock(PCI, timeout=0.5) as lock:
        assert lock.held


def test_different_keys_do_not_contend(tmp_path, holder):
    holder("pf-0000:3b:00.0")
    with Locks(tmp_path).lock(PCI, timeout=0.2) as lock:
        assert lock.held
