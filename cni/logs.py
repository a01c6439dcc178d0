# SPDX-License-Identifier: Apache-2.0
"""Plugin logging: level and destination from the netconf, context on each line.

Netconf keys (sriov-cni ``pkg/logging`` compatible): ``logLevel`` one of
``panic``, ``error``, ``warning``, ``info`` (default), ``debug``, ``verbose``
(finer than debug), and ``logFile`` (appended to; stderr when empty). Stdout
is never a destination: it carries the one result/error JSON.

Every line carries the attachment's context, added by a ``logging.Filter`` on
our handlers so modules keep using ``logging.getLogger(__name__)``::

    2026-12-02T13:57:20.123Z INFO  [sriov ADD cid=3f2a8c1d9e00 if=net1] cni.x: msg

When the runtime passes W3C trace context (libcni sets ``TRACEPARENT`` for
every plugin it runs), the trace id is on every line of that command too
(``trace=4bf92f3577b34da6a3ce929d0e0e4736``), so one pod's attach can be
found in the plugin logs from the runtime's trace.

``configure()`` replaces the handlers it installed before (in-process tests
run many commands in one interpreter) and leaves foreign handlers alone.

Standard library only.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

VERBOSE = 5
logging.addLevelName(VERBOSE, "VERBOSE")

LEVELS: dict[str, int] = {
    "panic": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "verbose": VERBOSE,
}
DEFAULT_LEVEL = "info"

_MARK = "_railyard_handler"

#: ``version-traceid-parentid-flags``, lowercase hex (W3C Trace Context).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_NO_TRACE = "0" * 32
_NO_PARENT = "0" * 16

# The context of the command being run (set by configure), so domain code can
# add e.g. the PCI address with ``logs.set_context(pci=...)`` without a handle.
_current: LogContext | None = None


@dataclass(slots=True)
class LogContext:
    """What every line says about the command it belongs to."""

    plugin: str = ""
    command: str = ""
    container_id: str = ""
    ifname: str = ""
    trace_id: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def render(self) -> str:
        parts = [p for p in (self.plugin, self.command) if p]
        if self.container_id:
            # 12 chars identify a container in every runtime's CLI.
            parts.append(f"cid={self.container_id[:12]}")
        if self.ifname:
            parts.append(f"if={self.ifname}")
        if self.trace_id:
            parts.append(f"trace={self.trace_id}")
        parts.extend(f"{k}={v}" for k, v in self.extra.items())
        return " ".join(parts)


def trace_id(env: Mapping[str, str]) -> str:
    """The trace id of ``TRACEPARENT`` in ``env``; "" when absent or not a
    valid traceparent (version ``ff``, an all-zero id: a log line must not
    carry a value the runtime's tracer would not recognise)."""
    value = env.get("TRACEPARENT", "")
    if not value:
        return ""
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return ""
    version, trace, parent = match.groups()
    if version == "ff" or trace == _NO_TRACE or parent == _NO_PARENT:
        return ""
    if version == "00" and match.end() != len(value.strip()):
        return ""  # version 00 has exactly four fields
    return trace


class ContextFilter(logging.Filter):
    """Adds ``record.ctx`` (the rendered LogContext) to every record."""

    def __init__(self, ctx: LogContext) -> None:
        super().__init__()
        self.ctx = ctx

    def filter(self, record: logging.LogRecord) -> bool:
        record.ctx = self.ctx.render()
        return True


class _Formatter(logging.Formatter):
    """Our line format; tracebacks only where ``tracebacks`` (the log file).

    On stderr a runtime shows the lines to the operator next to the error
    JSON; one line with the cause is what they need there, and the
    traceback of an unexpected error belongs in the log file, once.
    """

    def converter(self, secs: float | None = None) -> time.struct_time:  # UTC
        return time.gmtime(secs)

    def __init__(self, tracebacks: bool = True) -> None:
        super().__init__(
            "%(asctime)s.%(msecs)03dZ %(levelname)-7s [%(ctx)s] %(name)s: %(message)s",
            "%Y-%m-%dT%H:%M:%S",
        )
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        if self.tracebacks or not (record.exc_info or record.exc_text):
            return super().format(record)
        bare = logging.makeLogRecord(record.__dict__)
        bare.exc_info = None
        bare.exc_text = None
        bare.stack_info = None
        return super().format(bare)


class _Quiet:
    """A handler that cannot write (full disk, closed stderr) says so once on
    stderr, without a traceback, and drops its lines: logging must never
    fail the command nor reach stdout."""

    _complained = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802
        if self._complained:
            return
        self._complained = True
        exc = sys.exc_info()[1]
        try:
            sys.stderr.write(f"railyard: a log line was lost: {exc!r}\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - nowhere left to say it
            pass


class _FileHandler(_Quiet, logging.FileHandler):
    pass


class _StreamHandler(_Quiet, logging.StreamHandler):  # type: ignore[type-arg]
    pass


def _log_file_problem(path: str) -> str:
    """Why ``logFile`` cannot be used ("" when it can), checked without opening
    it: a FIFO would block the open and a device (/dev/full) fails every
    write. Only a regular file, or a new one in an existing directory, will do,
    named by an absolute path: a relative one would land wherever the runtime
    happened to start the plugin.
    """
    if not os.path.isabs(path):
        return "not an absolute path"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return (
            ""
            if os.path.isdir(os.path.dirname(os.path.abspath(path)))
            else ("its directory does not exist")
        )
    except (OSError, ValueError) as e:
        return str(e)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    return ""


def parse_level(name: str) -> int | None:
    """``logLevel`` -> logging level, or None when unknown ("" is the default)."""
    return LEVELS.get((name or DEFAULT_LEVEL).strip().lower())


@dataclass(slots=True)
class LogSetup:
    """Handlers installed by ``configure``; ``set_context``/``close`` act on them."""

    ctx: LogContext
    handlers: list[logging.Handler]
    previous_level: int = logging.WARNING

    def set_context(self, **changes: str) -> None:
        """Update the context shown on every following line."""
        for key, val in changes.items():
            if key in ("plugin", "command", "container_id", "ifname"):
                setattr(self.ctx, key, val)
            else:
                self.ctx.extra[key] = val

    def close(self) -> None:
        root = logging.getLogger()
        for h in self.handlers:
            root.removeHandler(h)
            h.close()
        if self.handlers:
            root.setLevel(self.previous_level)
        self.handlers.clear()


def set_context(**changes: str) -> None:
    """Add or change fields on every following line of the current command.

    ``plugin``, ``command``, ``container_id`` and ``ifname`` replace those
    fields; any other key is appended as ``key=value`` (e.g. ``pci``). A no-op
    when logging was not configured by ``configure`` (library use, tests).
    """
    ctx = _current
    if ctx is None:
        return
    for key, val in changes.items():
        if key in ("plugin", "command", "container_id", "ifname"):
            setattr(ctx, key, val)
        else:
            ctx.extra[key] = val


def _remove_ours() -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, _MARK, False):
            root.removeHandler(h)
            h.close()


def configure(
    level: str = "",
    log_file: str = "",
    stderr: IO[str] | None = None,
    ctx: LogContext | None = None,
) -> LogSetup:
    """Send log records to ``log_file`` (append) or ``stderr``, at ``level``.

    An unknown level or an unopenable file does not fail the command (the
    peers' behaviour); a WARNING on stderr says what was ignored.
    """
    global _current
    _remove_ours()
    ctx = ctx or LogContext()
    _current = ctx
    stream = stderr if stderr is not None else sys.stderr
    problems: list[str] = []
    lvl = parse_level(level)
    if lvl is None:
        problems.append(f"unknown logLevel {level!r}, using {DEFAULT_LEVEL!r}")
        lvl = LEVELS[DEFAULT_LEVEL]
    handler: logging.Handler | None = None
    if log_file:
        why = _log_file_problem(log_file)
        if not why:
            try:
                handler = _FileHandler(
                    log_file, mode="a", encoding="utf-8", errors="backslashreplace"
                )
            except (OSError, ValueError) as e:
                why = str(e)
        if why:
            problems.append(f"cannot open logFile {log_file!r} ({why}); using stderr")
    if handler is None:
        handler = _StreamHandler(stream)
        handler.setFormatter(_Formatter(tracebacks=False))
    else:
        handler.setFormatter(_Formatter())
    setattr(handler, _MARK, True)
    handler.addFilter(ContextFilter(ctx))
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(lvl)
    setup = LogSetup(ctx=ctx, handlers=[handler], previous_level=previous)
    log = logging.getLogger(__name__)
    for p in problems:
        log.warning("%s", p)
    return setup


@contextmanager
def configured(
    level: str = "",
    log_file: str = "",
    stderr: IO[str] | None = None,
    ctx: LogContext | None = None,
) -> Iterator[LogSetup]:
    """``configure`` for the duration of a block (closes the handlers after)."""
    setup = configure(level, log_file, stderr, ctx)
    try:
        yield setup
    finally:
        setup.close()
