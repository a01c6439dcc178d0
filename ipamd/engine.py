# SPDX-License-Identifier: Apache-2.0
"""The single writer: every request runs on one thread, commits are grouped.

Standard library only (the store is injected). Why one thread: SQLite admits
one writer at a time, and Python threads contending on its lock end in the
busy handler's multi-second sleeps. Here gRPC handler threads enqueue a
closure and wait on a Future; the writer takes everything queued (up to
``max_batch``), runs each closure against the in-memory ``AllocState`` (pure
policy), then makes all resulting store operations durable in ONE
transaction, and only then resolves the Futures. So:

- an acknowledged allocation is committed (``synchronous=FULL``): SIGKILL at
  any moment loses nothing acknowledged;
- N concurrent requests cost one fsync, not N (group commit);
- a request that raises changed nothing and does not disturb the others;
- if the commit fails, every request of the batch fails with ``Unavailable``
  and the in-memory state is rebuilt from the store, the source of truth.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from ipamd.allocator import AllocState
from ipamd.errors import Unavailable
from ipamd.store import (
    AllocationRow,
    DeleteAllocation,
    DeletePool,
    InsertAllocation,
    Op,
    PutPool,
    PutReserved,
    Store,
    StoreError,
    UpdateAllocation,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
# A job returns its reply and the store operations that make it durable.
Job = Callable[[AllocState], tuple[Any, Sequence[Op]]]


@dataclass(slots=True)
class _Item:
    job: Job
    future: Future[Any] | None = None  # a thread waits on it, or
    afuture: asyncio.Future[Any] | None = None  # an event loop awaits it


def _settle(results: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    """Resolve a batch's asyncio futures (runs on their loop's thread)."""
    for fut, ok, value in results:
        if fut.done():  # cancelled (client gone) or already failed
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


_STOP = object()


def _describe(row: AllocationRow) -> str:
    return (
        f"pool={row.pool} ip={row.ip} container={row.container_id or '-'} "
        f"ifname={row.ifname} network={row.network}"
        + (f" pod={row.pod_namespace}/{row.pod_name}" if row.pod_name else "")
    )


def log_ops(ops: Sequence[Op]) -> None:
    """One line per allocation and release (after the commit, never before)."""
    if not log.isEnabledFor(logging.INFO):
        return
    for op in ops:
        if isinstance(op, InsertAllocation):
            log.info("allocated %s", _describe(op.row))
        elif isinstance(op, DeleteAllocation):
            log.info("released %s", _describe(op.row))
        elif isinstance(op, UpdateAllocation):
            verb = "held for pod" if op.row.container_id is None else "reclaimed"
            log.info("%s %s", verb, _describe(op.row))
        elif isinstance(op, PutPool | PutReserved):
            kind = "SpiderIPPool" if isinstance(op, PutPool) else "SpiderReservedIP"
            log.info("applied %s/%s %s", kind, op.name, op.spec)
        else:
            kind = "SpiderIPPool" if isinstance(op, DeletePool) else "SpiderReservedIP"
            log.info("deleted %s/%s", kind, op.name)


class Engine:
    """Owns the AllocState and the store; see the module docstring."""

    def __init__(
        self,
        store: Store,
        max_batch: int = 1024,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._store = store
        self._max_batch = max_batch
        self._on_batch = on_batch  # metrics: the size of each group commit
        self.state = self._load()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._run, name="ipamd-writer", daemon=True
        )
        self.commits = 0
        self.healthy = True
        self._thread.start()

    def submit(self, job: Job) -> Future[Any]:
        fut: Future[Any] = Future()
        if not self._thread.is_alive():
            fut.set_exception(Unavailable("ipamd writer is stopped"))
            return fut
        self._queue.put(_Item(job, future=fut))
        return fut

    def submit_async(self, job: Job) -> asyncio.Future[Any]:
        """``submit`` for coroutines on the calling thread's running loop. The
        writer resolves a whole batch with one wake-up of the loop instead of
        one per request."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not self._thread.is_alive():
            fut.set_exception(Unavailable("ipamd writer is stopped"))
            return fut
        self._queue.put(_Item(job, afuture=fut))
        return fut

    def call(self, job: Job, timeout: float | None = None) -> Any:
        """Run ``job`` on the writer and wait until its effect is durable."""
        return self.submit(job).result(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout)
        self._store.close()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch = [first]
            stop = False
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                batch.append(item)
            if self._on_batch is not None:
                self._on_batch(len(batch))
            try:
                self._process(batch)
            except Exception as exc:  # a bug must not kill the only writer
                log.exception("writer failed on a batch of %d", len(batch))
                self._reload()
                self._fail(batch, Unavailable(f"ipamd internal error: {exc}"))
            if stop:
                return

    def _fail(self, batch: list[_Item], err: Exception) -> None:
        for item in batch:
            if item.afuture is not None:
                loop = item.afuture.get_loop()
                try:
                    loop.call_soon_threadsafe(_settle, [(item.afuture, False, err)])
                except RuntimeError:
                    pass
            elif item.future is not None and not item.future.done():
                item.future.set_exception(err)

    def _process(self, batch: list[_Item]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        ops: list[Op] = []
        for item in batch:
            if item.future is not None and not (
                item.future.set_running_or_notify_cancel()
            ):
                outcomes.append((False, None))
                continue
            try:
                reply, job_ops = item.job(self.state)
            except Exception as exc:  # reported to that caller only
                outcomes.append((False, exc))
                continue
            ops.extend(job_ops)
            outcomes.append((True, reply))
        try:
            self._store.apply(ops)
        except StoreError as exc:
            log.error("commit of %d operations failed: %s", len(ops), exc)
            self._reload()
            err = Unavailable(f"ipamd store failed, nothing changed: {exc}")
            outcomes = [(False, err) if ok else (ok, v) for ok, v in outcomes]
        else:
            self.commits += 1 if ops else 0
            log_ops(ops)
        by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        for item, (ok, value) in zip(batch, outcomes, strict=True):
            if item.afuture is not None:
                loop = item.afuture.get_loop()
                by_loop.setdefault(loop, []).append((item.afuture, ok, value))
                continue
            assert item.future is not None
            if item.future.cancelled():
                continue
            if ok:
                item.future.set_result(value)
            else:
                item.future.set_exception(value)
        for loop, results in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, results)
            except RuntimeError:  # the loop closed meanwhile: nobody waits
                pass

    def _load(self) -> AllocState:
        state = AllocState(self._store.load())
        # The loaded state (one object per allocation, 65k for a full /16) is
        # long-lived: keep the cyclic GC from re-walking it on every
        # collection, which would make allocations slower as pools fill.
        gc.collect()
        gc.freeze()
        return state

    def _reload(self) -> None:
        try:
            self.state = self._load()
            self.healthy = True
        except Exception as exc:  # the daemon reports not ready via Status
            log.error("reloading state from the store failed: %s", exc)
            self.healthy = False
