# SPDX-License-Identifier: Apache-2.0
"""One hard deadline per CNI command, so a stuck plugin never hangs the runtime.

kuryr-kubernetes arms SIGALRM and prints a CNI error when it fires. We do the
same in two stages:

1. At ``seconds``: the SIGALRM handler raises ``DeadlineExceeded`` (a
   ``BaseException``, so plugin code catching ``Exception`` cannot swallow it)
   in the main thread. The command's ``Rollback`` unwinds, locks are released,
   and ``cni.skel`` prints error code 105 (TIMEOUT) and exits 1.
2. At ``seconds + grace``: if the process is still running (stuck in a call
   that never returns to the interpreter, or a rollback that hangs), a
   watchdog thread writes the same error JSON through ``OutputOnce`` and
   calls ``os._exit(1)``. A daemon thread is used because a Python signal
   handler only runs when the main thread gets back to the interpreter.

``OutputOnce`` guarantees stdout carries exactly one complete JSON document:
skel writes its result through it at the very end, the watchdog writes through
it too, and whichever comes first wins under a lock.

Configuration: ``run_plugin(deadline_seconds=...)`` per plugin (default 120 s;
a mapping such as ``{"GC": 600}`` sets it per command); env
``RAILYARD_DEADLINE`` (seconds, float; ``0`` disables) overrides it, and
``RAILYARD_DEADLINE_GRACE`` the grace period (default 10 s).

Standard library only. SIGALRM is only available in the main thread; called
from another thread, stage 1 is skipped and stage 2 still applies.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType, TracebackType
from typing import IO, Any

from cni.errors import TIMEOUT, CniError

DEADLINE_ENV = "RAILYARD_DEADLINE"
GRACE_ENV = "RAILYARD_DEADLINE_GRACE"
DEFAULT_SECONDS = 120.0
DEFAULT_GRACE = 10.0

log = logging.getLogger(__name__)


#: The armed deadline of the command running in this process (None: none),
#: so a blocking call deep in the plugin can bound its own timeout by it.
_active: Deadline | None = None
#: The share of the deadline kept free for the rollback after a bounded
#: call gave up, at most ``_RESERVE_MAX`` seconds.
_RESERVE_SHARE = 0.25
_RESERVE_MAX = 5.0


def remaining() -> float | None:
    """Seconds left for blocking work before the command's deadline, keeping
    a reserve for the rollback; None when no deadline is armed.

    A call that blocks in C (a gRPC call, a subprocess wait) cannot be
    interrupted by stage 1, so it must give up by itself in time for the
    command to unwind and answer (11, "try again later") before stage 2 kills
    the process with the work half-undone.
    """
    active = _active
    if active is None or active.seconds is None or active.started is None:
        return None
    reserve = min(active.seconds * _RESERVE_SHARE, _RESERVE_MAX)
    return active.started + active.seconds - reserve - time.monotonic()


class DeadlineExceeded(BaseException):
    """Raised in the main thread when the command's deadline expires."""

    def __init__(self, seconds: float, command: str = "") -> None:
        super().__init__(f"{command or 'command'} exceeded its {seconds:g}s deadline")
        self.seconds = seconds
        self.command = command

    def to_cni_error(self) -> CniError:
        return CniError(TIMEOUT, "command timed out", str(self))


def _env_float(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        val = float(raw)
    except ValueError:
        log.warning("ignoring %s=%r: not a number of seconds", name, raw)
        return None
    if val < 0 or val != val:  # negative or NaN
        log.warning("ignoring %s=%r: must be >= 0", name, raw)
        return None
    return val


def resolve_seconds(
    default: float | Mapping[str, float] | None,
    env: Mapping[str, str],
    command: str = "",
) -> float | None:
    """The deadline to use: env ``RAILYARD_DEADLINE`` > ``default``; None = off.

    ``default`` may map command names to seconds (``{"GC": 600}``); commands
    it does not name get ``DEFAULT_SECONDS``.
    """
    val = _env_float(env, DEADLINE_ENV)
    if val is None:
        if isinstance(default, Mapping):
            val = default.get(command, DEFAULT_SECONDS)
        else:
            val = default
    return val if val else None


def resolve_grace(env: Mapping[str, str]) -> float:
    val = _env_float(env, GRACE_ENV)
    return DEFAULT_GRACE if val is None else val


class OutputOnce:
    """Writes one document to a stream, once, atomically w.r.t. the watchdog."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.written = False

    def write(self, text: str) -> bool:
        """Write ``text`` and flush unless something was written already."""
        return self.try_write(text, timeout=-1)

    def try_write(self, text: str, timeout: float) -> bool:
        """Like ``write`` but gives up after ``timeout`` (-1: waits) if the lock
        is busy."""
        if not self._lock.acquire(timeout=timeout):
            return False
        try:
            if self.written:
                return False
            self.written = True
            self._stream.write(text)
            self._stream.flush()
            return True
        finally:
            self._lock.release()


class Deadline:
    """Context manager arming both stages around one command (see module doc).

    Args:
        seconds: stage-1 deadline; None or 0 disables both stages.
        command: for messages ("ADD exceeded its 120s deadline").
        output: where the watchdog writes the timeout error.
        render_error: builds the error document at expiry time (so it carries
            the cniVersion known by then).
        grace: stage 2 fires this long after stage 1.
        hard_exit: what stage 2 calls after writing; ``os._exit`` in
            production, replaceable by tests running in-process.
    """

    def __init__(
        self,
        seconds: float | None,
        command: str,
        output: OutputOnce,
        render_error: Callable[[CniError], str],
        grace: float = DEFAULT_GRACE,
        hard_exit: Callable[[int], Any] = os._exit,
    ) -> None:
        self.seconds = seconds or None
        self.command = command
        self._output = output
        self._render = render_error
        self.grace = grace
        self._hard_exit = hard_exit
        self._prev_handler: Any = None
        self._armed_signal = False
        self._timer: threading.Timer | None = None
        self.started: float | None = None
        self.expired = False

    # stage 1 -----------------------------------------------------------
    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        self.expired = True
        assert self.seconds is not None
        raise DeadlineExceeded(self.seconds, self.command)

    # stage 2 -----------------------------------------------------------
    def _on_watchdog(self) -> None:
        assert self.seconds is not None
        err = DeadlineExceeded(self.seconds, self.command).to_cni_error()
        err.details += f"; no clean exit within {self.grace:g}s grace, killed"
        try:
            log.error("%s", err)
        except Exception:  # noqa: BLE001 - logging must not stop the exit
            pass
        if self._output.try_write(self._render(err), timeout=1.0):
            self._hard_exit(1)

    def __enter__(self) -> Deadline:
        global _active
        if self.seconds is None:
            return self
        self.started = time.monotonic()
        _active = self
        if threading.current_thread() is threading.main_thread():
            self._prev_handler = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self._armed_signal = True
        self._timer = threading.Timer(self.seconds + self.grace, self._on_watchdog)
        self._timer.daemon = True
        self._timer.start()
        return self

    def disarm(self) -> None:
        """Stop both stages (idempotent); called before printing the result."""
        global _active
        if _active is self:
            _active = None
        if self._armed_signal:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._prev_handler or signal.SIG_DFL)
            self._armed_signal = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.disarm()
