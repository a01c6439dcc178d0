# SPDX-License-Identifier: Apache-2.0
"""The single writer: every request runs on one thread, commits are grouped,
and the thread holds the store's writer lease while it is the active replica.

Standard library only (the store is injected). Why one thread: SQLite admits
one writer at a time, and Python threads contending on its lock end in the
busy handler's multi-second sleeps; PostgreSQL pays a round trip per commit.
gRPC handler coroutines enqueue a closure and await an asyncio Future; the
writer takes everything queued (up to ``max_batch``), runs each closure
against the in-memory ``AllocState`` (pure policy), then makes all resulting
store operations durable in ONE transaction, and only then resolves the
Futures (one wake-up of the event loop per batch). So:

- an acknowledged allocation is committed: SIGKILL at any moment loses
  nothing acknowledged;
- N concurrent requests cost one commit, not N (group commit);
- a request that raises changed nothing and does not disturb the others;
- if the commit fails, every request of the batch fails with ``Unavailable``
  and the in-memory state is rebuilt from the store, the source of truth.

Replicas: several engines may share one database. Only the holder of the
store's lease is ACTIVE and runs jobs; the others are STANDBY, refuse every
job with ``Unavailable`` and try to take the lease every ``ttl / 10``
seconds. The active renews it every ``ttl / 4`` seconds (every commit renews
it too) and steps down when a renewal finds it taken over, or when it could
not renew for a whole ``ttl`` (lost database). On takeover the state is
rebuilt from the database. Every commit is fenced by the lease's token (see
``ipamd.store``), so a replica that was paused and wakes up after a takeover
fails its in-flight batch instead of writing.
"""

from __future__ import annotations

import asyncio
import enum
import gc
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ipamd.allocator import AllocState
from ipamd.errors import Unavailable
from ipamd.pools import brief
from ipamd.store import (
    AllocationRow,
    DeleteAllocation,
    DeletePool,
    InsertAllocation,
    LeaseView,
    Op,
    PutPool,
    PutReserved,
    Store,
    StoreError,
    StoreFenced,
    UpdateAllocation,
)

log = logging.getLogger(__name__)

# A job returns its reply and the store operations that make it durable.
Job = Callable[[AllocState], tuple[Any, Sequence[Op]]]


class Role(enum.Enum):
    ACTIVE = "active"
    STANDBY = "standby"


@dataclass(slots=True)
class _Item:
    job: Job
    future: asyncio.Future[Any]  # awaited on its event loop


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
            # A spec can hold 10,000 addresses: the line shows its start.
            log.info("applied %s/%s %s", kind, op.name, brief(str(op.spec), 300))
        else:
            kind = "SpiderIPPool" if isinstance(op, DeletePool) else "SpiderReservedIP"
            log.info("deleted %s/%s", kind, op.name)


class Engine:
    """Owns the AllocState, the store and the lease; see the module docstring."""

    def __init__(
        self,
        store: Store,
        holder: str = "ipamd",
        max_batch: int = 1024,
        lease_ttl: float = 1.0,
    ) -> None:
        self._store = store
        self.holder = holder
        self._max_batch = max_batch
        self._ttl = lease_ttl
        self.role = Role.STANDBY
        self.state: AllocState | None = None
        self.lease = LeaseView("", 0, 0.0)  # as last seen by this replica
        self.commits = 0
        self.takeover_seconds = 0.0  # how long the last state rebuild took
        self._renewed_at = 0.0  # monotonic time of our last proof of the lease
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # The first attempt runs before serving: a lone replica (the embedded
        # SQLite default) is active when ``build`` returns.
        self._tend_lease()
        self._thread = threading.Thread(
            target=self._run, name="ipamd-writer", daemon=True
        )
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def active(self) -> bool:
        return self.role is Role.ACTIVE and self._thread.is_alive()

    @property
    def database(self) -> str:
        return self._store.describe()

    def submit_async(self, job: Job) -> asyncio.Future[Any]:
        """Run ``job`` on the writer; the future resolves once its effect is
        durable. A standby (or stopped) engine fails it with Unavailable."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not self.active:
            fut.set_exception(self.unavailable())
            return fut
        self._queue.put(_Item(job, fut))
        return fut

    def unavailable(self) -> Unavailable:
        """Why this replica refuses work (it is a standby or stopped)."""
        if not self._thread.is_alive():
            return Unavailable("ipamd writer is stopped")
        holder = self.lease.holder if self.lease.remaining > 0 else ""
        return Unavailable(
            f"ipamd {self.holder} is a standby replica"
            + (f"; the active one is {holder}" if holder else "; no replica is active")
        )

    def wait_active(self, timeout: float) -> bool:
        """Block until this replica is active (tests, tools)."""
        deadline = time.monotonic() + timeout
        while not self.active:
            if time.monotonic() > deadline or not self._thread.is_alive():
                return False
            time.sleep(0.01)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the writer and hand the lease over at once (a standby need
        not wait for it to expire)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout)
        self.role = Role.STANDBY
        try:
            self._store.release_lease()
        except StoreError as exc:
            log.warning("could not release the writer lease: %s", exc)
        self._store.close()

    # -- the writer thread -------------------------------------------------

    def _run(self) -> None:
        next_tend = time.monotonic()
        while True:
            wait = max(0.0, next_tend - time.monotonic())
            try:
                first = self._queue.get(timeout=wait)
            except queue.Empty:
                first = None
            if first is _STOP:
                return
            if time.monotonic() >= next_tend:
                self._tend_lease()
                every = self._ttl / 4 if self.role is Role.ACTIVE else self._ttl / 10
                next_tend = time.monotonic() + every
            if first is None:
                continue
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
            if self.role is not Role.ACTIVE:
                self._settle(batch, [(False, self.unavailable())] * len(batch))
            else:
                try:
                    self._process(batch)
                except Exception as exc:  # a bug must not kill the only writer
                    log.exception("writer failed on a batch of %d", len(batch))
                    self._reload()
                    err = Unavailable(f"ipamd internal error: {exc}")
                    self._settle(batch, [(False, err)] * len(batch))
            if stop:
                return

    def _tend_lease(self) -> None:
        """Renew the lease (active) or try to take it over (standby)."""
        if self.role is Role.ACTIVE:
            try:
                kept = self._store.renew_lease(self._ttl)
            except StoreError as exc:
                lost_for = time.monotonic() - self._renewed_at
                log.error("renewing the writer lease failed (%.1fs): %s", lost_for, exc)
                if lost_for >= self._ttl:
                    self._step_down("the database was unreachable for a whole lease")
                return
            if kept:
                self._renewed_at = time.monotonic()
            else:
                self._step_down("another replica took the writer lease over")
            return
        try:
            view = self._store.acquire_lease(self.holder, self._ttl)
        except StoreError as exc:
            log.warning("standby: cannot reach the database: %s", exc)
            return
        if view.holder != self.holder:
            if view.holder != self.lease.holder:
                log.info("standby: the writer lease is held by %s", view.holder)
            self.lease = view
            return
        self._take_over(view)

    def _take_over(self, view: LeaseView) -> None:
        started = time.monotonic()
        previous = self.lease.holder
        try:
            self.state = self._load()
        except Exception as exc:
            log.error("took the writer lease but cannot load the state: %s", exc)
            try:
                self._store.release_lease()
            except StoreError:
                pass  # it expires by itself
            return
        self.takeover_seconds = time.monotonic() - started
        self.lease = view
        self._renewed_at = started
        self.role = Role.ACTIVE
        log.warning(
            "active: holding the writer lease (token %d%s); state rebuilt in %.3fs: "
            "%d pools, %d allocations",
            view.token,
            f", taken over from {previous}" if previous else "",
            self.takeover_seconds,
            len(self.state.pools),
            len(self.state.rows),
        )

    def _step_down(self, why: str) -> None:
        log.error("standby: %s; this replica stops serving allocations", why)
        self.role = Role.STANDBY
        self.state = None
        self.lease = LeaseView("", self.lease.token, 0.0)

    def _process(self, batch: list[_Item]) -> None:
        assert self.state is not None
        outcomes: list[tuple[bool, Any]] = []
        ops: list[Op] = []
        for item in batch:
            if item.future.done():  # cancelled: the client is gone
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
        except StoreFenced as exc:
            self._step_down(str(exc))
            err = Unavailable(f"ipamd lost the writer lease, nothing changed: {exc}")
            outcomes = [(False, err) if ok else (ok, v) for ok, v in outcomes]
        except StoreError as exc:
            log.error("commit of %d operations failed: %s", len(ops), exc)
            self._reload()
            err = Unavailable(f"ipamd store failed, nothing changed: {exc}")
            outcomes = [(False, err) if ok else (ok, v) for ok, v in outcomes]
        else:
            if ops:
                self.commits += 1
                self._renewed_at = time.monotonic()  # the commit renewed it
            log_ops(ops)
        self._settle(batch, outcomes)

    @staticmethod
    def _settle(batch: list[_Item], outcomes: list[tuple[bool, Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        for item, (ok, value) in zip(batch, outcomes, strict=True):
            loop = item.future.get_loop()
            by_loop.setdefault(loop, []).append((item.future, ok, value))
        for loop, results in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, results)
            except RuntimeError:  # the loop closed meanwhile: nobody waits
                pass

    def _load(self) -> AllocState:
        # A takeover waits for this. Creating one object per allocation (65k
        # for a full /16) would trigger a cyclic collection every 700 of
        # them, each re-walking everything made so far: off until done.
        gc.disable()
        try:
            state = AllocState(self._store.load())
        finally:
            gc.enable()
        # The loaded state is long-lived: keep the cyclic GC from re-walking
        # it on every collection, which would make allocations slower as
        # pools fill.
        gc.collect()
        gc.freeze()
        return state

    def _reload(self) -> None:
        try:
            self.state = self._load()
        except Exception as exc:
            self._step_down(f"reloading state from the store failed: {exc}")
