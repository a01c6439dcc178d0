# SPDX-License-Identifier: Apache-2.0
"""cni.state.locks: flock per key across processes, bounded wait, code 11."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cni.errors import CniError
from cni.state.locks import Locks, LockTimeout

PCI = "0000:3b:02.1"

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


def test_release_lets_the_next_acquirer_in(tmp_path):
    locks = Locks(tmp_path)
    with locks.lock(PCI):
        assert locks.held() == {PCI}
    assert locks.held() == frozenset()
    with locks.lock(PCI, timeout=0.1) as again:
        assert again.held


def test_reentrant_acquisition_fails_fast_instead_of_self_deadlocking(tmp_path):
    locks = Locks(tmp_path)
    with locks.lock(PCI):
        start = time.monotonic()
        with pytest.raises(RuntimeError):
            locks.lock(PCI, timeout=5).acquire()
        assert time.monotonic() - start < 1


def test_same_key_through_another_locks_object_also_fails_fast(tmp_path):
    with Locks(tmp_path).lock(PCI):
        with pytest.raises(RuntimeError):
            Locks(tmp_path).lock(PCI, timeout=5).acquire()
    with Locks(tmp_path).lock(PCI, timeout=0.1) as lock:
        assert lock.held


def test_lock_files_live_under_locks_dir_with_tight_modes(tmp_path):
    old = os.umask(0o022)
    try:
        with Locks(tmp_path).lock(PCI) as lock:
            assert lock.path == tmp_path / "locks" / f"{PCI}.lock"
            assert stat.S_IMODE(lock.path.stat().st_mode) == 0o600
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "locks").stat().st_mode) == 0o700
    assert lock.path.exists()  # never unlinked (see module doc)


def test_release_is_idempotent(tmp_path):
    lock = Locks(tmp_path).lock(PCI).acquire()
    lock.release()
    lock.release()
    assert not lock.held


@pytest.mark.parametrize("key", ["", "a/b", "..", "."])
def test_keys_that_are_not_plain_file_names_are_refused(tmp_path, key):
    with pytest.raises(ValueError):
        Locks(tmp_path).lock(key)


def test_a_lent_lock_is_borrowed_by_the_code_its_holder_calls(tmp_path: Path) -> None:
    from cni.state.locks import lent

    outer = Locks(tmp_path).lock(PCI, timeout=0).acquire()
    try:
        with lent(outer):
            with Locks(tmp_path).lock(PCI, timeout=0) as inner:
                assert inner.held
            # The borrower's release left the lender's hold in place.
            assert outer.held
        with pytest.raises(RuntimeError, match="already held"):
            Locks(tmp_path).lock(PCI, timeout=0).acquire()
    finally:
        outer.release()
    assert not outer.held
    with Locks(tmp_path).lock(PCI, timeout=0) as again:
        assert again.held


def test_a_lock_not_held_cannot_be_lent(tmp_path: Path) -> None:
    from cni.state.locks import lent

    with pytest.raises(RuntimeError, match="not held"):
        with lent(Locks(tmp_path).lock(PCI)):
            pass
