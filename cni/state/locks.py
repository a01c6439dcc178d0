# SPDX-License-Identifier: Apache-2.0
"""Cross-process exclusive locks with a timeout: ``flock`` on a file per key.

ADD and DEL of two pods on one VF must serialise (sriov-cni's
``pkg/utils/pci_allocator`` / host-local's flock). Keys are PCI addresses
(``0000:3b:02.1``) or any short name; a per-PF lock is just another key, e.g.
``locks.lock("pf-0000:3b:00.0")``. Lock files live in ``<state_dir>/locks/``
(0700 dir, 0600 files) and are never deleted: unlinking a lock file while
another process waits on its inode would let a third process lock a fresh
inode and run concurrently.

The kernel drops an ``flock`` when its file description is closed, so a lock
is released when the plugin process exits or is killed (SIGALRM deadline,
SIGKILL) — no stale locks after a crash.

Waiting is a bounded poll (``LOCK_NB`` with backoff from 1 ms to 50 ms) rather
than a blocking ``flock`` interrupted by a signal, because SIGALRM already
belongs to ``cni.deadline``. On timeout ``LockTimeout`` (a CniError with code
11, "try again later") names the key and the holder's PID when known.

Locks are not reentrant: ``flock`` on a second descriptor of the same file in
the same process would wait for itself, so acquiring a lock file this process
already holds (through any ``Locks`` object) raises RuntimeError immediately -
unless its holder lent it (``lent``): the node agent's reconcile takes a VF's
locks itself, decides under them that its pod is gone, and lets the plugin's
own DEL, which takes the same locks, run inside that hold, so no ADD can slip
in between the decision and the DEL.

Standard library only.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from cni.errors import IO_FAILURE, TRY_AGAIN_LATER, CniError

DEFAULT_TIMEOUT = 30.0  # seconds; below the command deadline so we can report

# Lock files held by this process, whichever Locks object took them.
_HELD_PATHS: set[str] = set()
# Of those, the ones their holder lends to the code it calls (``lent``).
_LENT_PATHS: set[str] = set()


class LockTimeout(CniError):
    """The lock stayed held by another process for the whole timeout."""

    def __init__(self, key: str, timeout: float, holder: str = "") -> None:
        details = f"lock {key!r} still held after {timeout:g}s"
        if holder:
            details += f" (by pid {holder})"
        super().__init__(
            TRY_AGAIN_LATER, "device is locked by another operation", details
        )
        self.key = key


def _safe_name(key: str) -> str:
    if not key or key in (".", "..") or "/" in key or "\0" in key:
        raise ValueError(f"invalid lock key {key!r}")
    return key


class FileLock:
    """One held-or-not lock; use as a context manager or acquire()/release()."""

    def __init__(self, owner: Locks, key: str, timeout: float) -> None:
        self._owner = owner
        self.key = key
        self.timeout = timeout
        self.path = owner.dir / f"{_safe_name(key)}.lock"
        self._abspath = os.path.abspath(self.path)
        self._fd: int | None = None
        self._borrowed = False

    @property
    def held(self) -> bool:
        return self._fd is not None or self._borrowed

    def acquire(self) -> FileLock:
        """Block up to ``timeout`` seconds; raise LockTimeout (code 11) after."""
        if self._fd is None and not self._borrowed and self._abspath in _LENT_PATHS:
            self._borrowed = True  # held by our caller for us (``lent``)
            return self
        if self._fd is not None or self._abspath in _HELD_PATHS:
            raise RuntimeError(f"lock {self.key!r} is already held by this process")
        self._owner._ensure_dir()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise CniError(
                IO_FAILURE, "failed to open lock file", f"{self.path}: {e}"
            ) from e
        deadline = time.monotonic() + self.timeout
        pause = 0.001
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EINTR):
                        raise CniError(
                            IO_FAILURE, "failed to lock", f"{self.path}: {e}"
                        ) from e
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise LockTimeout(self.key, self.timeout, _read_holder(fd))
                time.sleep(min(pause, remaining))
                pause = min(pause * 2, 0.05)
        except BaseException:
            os.close(fd)
            raise
        # Record the holder for a waiter's error message; purely informative.
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        self._fd = fd
        self._owner._held.add(self.key)
        _HELD_PATHS.add(self._abspath)
        return self

    def release(self) -> None:
        """Unlock (idempotent). Closing the fd drops the flock; a borrowed
        lock stays with its lender."""
        self._borrowed = False
        fd, self._fd = self._fd, None
        if fd is None:
            return
        self._owner._held.discard(self.key)
        _HELD_PATHS.discard(self._abspath)
        os.close(fd)

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


@contextmanager
def lent(*locks: FileLock) -> Iterator[None]:
    """While the block runs, code of this process taking any of ``locks``
    (held by the caller) borrows the hold instead of waiting for itself."""
    paths = {lock._abspath for lock in locks}
    for lock in locks:
        if lock._fd is None:
            raise RuntimeError(f"lock {lock.key!r} is not held: nothing to lend")
    fresh = paths - _LENT_PATHS
    _LENT_PATHS.update(fresh)
    try:
        yield
    finally:
        _LENT_PATHS.difference_update(fresh)


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""


class Locks:
    """Factory of per-key locks under ``<state_dir>/locks/``."""

    def __init__(self, state_dir: Path | str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.dir = Path(state_dir) / "locks"
        self.timeout = timeout
        self._held: set[str] = set()

    def _ensure_dir(self) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def lock(self, key: str, timeout: float | None = None) -> FileLock:
        """A lock for ``key`` (not yet acquired): ``with locks.lock(pci): ...``."""
        return FileLock(self, key, self.timeout if timeout is None else timeout)

    def held(self) -> frozenset[str]:
        """Keys this process currently holds through this object."""
        return frozenset(self._held)
