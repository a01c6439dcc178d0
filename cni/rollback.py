# SPDX-License-Identifier: Apache-2.0
"""Undo stack for multi-step commands (ADD): every step registers its undo.

The sriov-cni scar this answers (issue #119): a failure half-way through ADD
left the VF moved, renamed or re-MACed. Here each step pushes its inverse right
after it succeeds; ``commit()`` on success forgets them; any exception unwinds
them newest first. An undo that itself fails is logged (with its traceback)
and the unwinding goes on, so one stuck step never hides the others, and the
original exception is what propagates — never an undo error.

Usage::

    with Rollback(log) as rb:
        move_vf(...)
        rb.push(lambda: move_back(...), "move VF back to the host")
        ...
        rb.commit()

Leaving the ``with`` block without ``commit()`` and without an exception also
unwinds (a forgotten commit must not leak a half-made attachment); that case
is logged at WARNING.

Standard library only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal

_log = logging.getLogger(__name__)


class Rollback:
    """An ExitStack-like list of (undo, description), unwound newest first."""

    def __init__(self, log: logging.Logger | logging.LoggerAdapter[Any] | None = None):
        self._log = log or _log
        self._undos: list[tuple[Callable[[], object], str]] = []
        self._committed = False
        #: (description, exception) of every undo that failed in the last unwind.
        self.failures: list[tuple[str, BaseException]] = []

    def push(self, undo: Callable[[], object], description: str) -> None:
        """Register ``undo`` (no arguments) for the step that just succeeded."""
        if self._committed:
            raise RuntimeError("Rollback.push after commit()")
        self._undos.append((undo, description))

    def __len__(self) -> int:
        return len(self._undos)

    @property
    def descriptions(self) -> list[str]:
        """Pending undo descriptions, oldest first (for logs and tests)."""
        return [d for _, d in self._undos]

    def commit(self) -> None:
        """Success: drop every undo; nothing will be rolled back."""
        self._undos.clear()
        self._committed = True

    def unwind(self) -> list[tuple[str, BaseException]]:
        """Run all pending undos newest first; return (and keep) the failures.

        Every undo runs even if an earlier one raised; ``KeyboardInterrupt``
        and ``SystemExit`` raised by an undo are recorded, not propagated, so
        a deadline firing during rollback still lets the rest run.
        """
        self.failures = []
        while self._undos:
            undo, desc = self._undos.pop()
            try:
                undo()
            except BaseException as e:  # noqa: BLE001 - see docstring
                self.failures.append((desc, e))
                self._log.error("rollback: %s failed: %s", desc, e, exc_info=e)
            else:
                self._log.info("rollback: %s", desc)
        return self.failures

    def __enter__(self) -> Rollback:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if self._committed:
            return False
        if exc is None and self._undos:
            self._log.warning(
                "rollback: block left without commit(); undoing %d step(s)",
                len(self._undos),
            )
        elif exc is not None and self._undos:
            self._log.info(
                "rollback: undoing %d step(s) after: %s", len(self._undos), exc
            )
        self.unwind()
        if exc is not None and self.failures:
            # Keep the original exception; note the failed undos on it so the
            # CNI error's details can say what is left behind.
            note = "rollback incomplete: " + "; ".join(
                f"{d}: {e}" for d, e in self.failures
            )
            exc.add_note(note)
        return False  # never swallow the original exception
