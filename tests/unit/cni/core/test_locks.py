# SPDX-License-Identifier: Apache-2.0
"""cni.state.locks: flock per key across processes, bounded wait, code 11."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from cni.state.locks import Locks

PCI = "0000:3b:02.1"


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
