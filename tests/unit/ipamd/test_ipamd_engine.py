# SPDX-License-Identifier: Apache-2.0
"""The single-writer engine: group commit, ack after commit, failure recovery,
and the active/standby roles of replicas sharing one store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import pytest

from ipamd import pool_admin
from ipamd.allocator import AllocateRequest
from ipamd.engine import Engine, Role
from ipamd.errors import Exhausted, Unavailable
from ipamd.manifest import parse_manifest
from ipamd.store import Op, StoreError
from ipamd.store.memory import MemoryStore
from ipamd.store.sql import SqlStore

POOL = """
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: p}
spec: {subnet: 10.0.0.0/24, ips: [10.0.0.1-10.0.0.100]}
"""


class GatedStore(MemoryStore):
    """A MemoryStore whose commits can be held at a gate or made to fail."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.batches: list[int] = []
        self.fail = False

    def apply(self, ops: Sequence[Op]) -> None:
        self.entered.set()
        self.gate.wait(10)
        if self.fail and ops:
            raise StoreError("disk full")
        if ops:
            self.batches.append(len(ops))
        super().apply(ops)


def alloc(cid: str) -> AllocateRequest:
    return AllocateRequest(
        network="n", container_id=cid, ifname="net1", ipv4_pools=("p",)
    )


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    """Run the coroutine function on a fresh event loop, as the gRPC server does."""
    return asyncio.run(asyncio.wait_for(main(), 10))


def call(eng: Engine, job: Any) -> Any:
    async def main() -> Any:
        return await eng.submit_async(job)

    return run(main)


def add_pool(eng: Engine) -> None:
    pools, reserved = parse_manifest(POOL)
    call(eng, lambda st: pool_admin.apply_pools(st, pools, reserved))


@pytest.fixture
def engine() -> Iterator[tuple[Engine, GatedStore]]:
    store = GatedStore()
    eng = Engine(store, holder="a")
    add_pool(eng)
    try:
        yield eng, store
    finally:
        store.gate.set()
        eng.stop()


def test_a_lone_replica_is_active_when_built(engine) -> None:
    eng, _ = engine
    assert eng.role is Role.ACTIVE
    assert eng.lease.holder == "a"


def test_requests_queued_during_a_commit_share_the_next_commit(engine) -> None:
    eng, store = engine
    store.gate.clear()
    store.entered.clear()

    async def main() -> set[str]:
        first = eng.submit_async(lambda st: st.allocate(alloc("c0")))
        assert await asyncio.to_thread(store.entered.wait, 5)  # inside commit 1
        rest = [
            eng.submit_async(lambda st, n=n: st.allocate(alloc(f"c{n}")))
            for n in range(1, 50)
        ]
        await asyncio.sleep(0.05)
        assert not first.done()  # not acknowledged before its commit
        store.gate.set()
        return {r[0].address for r in await asyncio.gather(first, *rest)}

    assert len(run(main)) == 50
    assert store.batches[-2:] == [1, 49]


def test_a_failing_job_does_not_disturb_its_batch(engine) -> None:
    eng, store = engine
    store.gate.clear()
    store.entered.clear()

    async def main() -> None:
        blocker = eng.submit_async(lambda st: (None, []))
        bad = eng.submit_async(
            lambda st: st.allocate(
                AllocateRequest(
                    network="n", container_id="x", ifname="net1", ipv4_pools=("nope",)
                )
            )
        )
        good = eng.submit_async(lambda st: st.allocate(alloc("ok")))
        store.gate.set()
        await blocker
        with pytest.raises(Exception, match="IPPool nope not found"):
            await bad
        assert (await good)[0].address == "10.0.0.1/24"

    run(main)


def test_failed_commit_fails_the_batch_and_restores_state(engine) -> None:
    eng, store = engine
    call(eng, lambda st: st.allocate(alloc("kept")))
    store.fail = True
    with pytest.raises(Unavailable, match="nothing changed: disk full"):
        call(eng, lambda st: st.allocate(alloc("lost")))
    store.fail = False
    assert eng.state is not None and eng.state.get("lost", "net1") == []
    # The address the failed batch had picked is free again.
    leases = call(eng, lambda st: st.allocate(alloc("next")))
    assert leases[0].address == "10.0.0.2/24"


def test_exhaustion_raises_to_the_caller(engine) -> None:
    eng, _ = engine
    for n in range(100):
        call(eng, lambda st, n=n: st.allocate(alloc(f"c{n}")))
    with pytest.raises(Exhausted):
        call(eng, lambda st: st.allocate(alloc("one-too-many")))


def test_stopped_engine_refuses_new_work(engine) -> None:
    eng, _ = engine
    eng.stop()
    with pytest.raises(Unavailable, match="stopped"):
        call(eng, lambda st: (None, ()))


def test_a_bug_in_a_batch_fails_it_and_keeps_the_writer_alive(engine) -> None:
    eng, _ = engine

    class Unloggable:
        """An op the store cannot apply and does not expect (a bug)."""

    with pytest.raises(Unavailable, match="internal error"):
        call(eng, lambda st: (None, [Unloggable()]))
    assert eng.alive
    assert call(eng, lambda st: st.allocate(alloc("after")))[0].address


# -- replicas on one database (SQLite file: two stores, one lease row) -------


@pytest.fixture
def replicas(tmp_path) -> Iterator[Callable[..., Engine]]:
    made: list[Engine] = []

    def make(holder: str, lease_ttl: float = 0.5) -> Engine:
        eng = Engine(
            SqlStore(f"sqlite:///{tmp_path / 'db'}"), holder, lease_ttl=lease_ttl
        )
        made.append(eng)
        return eng

    try:
        yield make
    finally:
        for eng in made:
            eng.stop()


def test_a_second_replica_is_a_standby_that_refuses_work(replicas) -> None:
    a = replicas("a")
    b = replicas("b")
    assert (a.role, b.role) == (Role.ACTIVE, Role.STANDBY)
    assert b.lease.holder == "a"
    with pytest.raises(Unavailable, match="standby replica; the active one is a"):
        call(b, lambda st: (None, ()))


def test_the_standby_takes_over_with_the_state_when_the_active_stops(
    replicas,
) -> None:
    a = replicas("a")
    add_pool(a)
    call(a, lambda st: st.allocate(alloc("c1")))
    b = replicas("b")
    a.stop()  # hands the lease over
    assert b.wait_active(2)
    assert b.state is not None and [x.address for x in b.state.get("c1", "net1")] == [
        "10.0.0.1/24"
    ]
    assert call(b, lambda st: st.allocate(alloc("c2")))[0].address == "10.0.0.2/24"


def test_a_paused_active_is_deposed_and_its_in_flight_commit_fails(
    replicas,
) -> None:
    # A short lease: the test waits for it to run out.
    a = replicas("a", lease_ttl=0.25)
    add_pool(a)
    b = replicas("b", lease_ttl=0.25)
    resume = threading.Event()

    def paused_allocation(st):
        # a's writer hangs mid-batch: no renewal, its lease runs out.
        resume.wait(5)
        return st.allocate(alloc("late"))

    async def main() -> None:
        in_flight = a.submit_async(paused_allocation)
        assert await asyncio.to_thread(b.wait_active, 3)
        resume.set()
        with pytest.raises(Unavailable, match="lost the writer lease"):
            await in_flight

    run(main)
    assert a.role is Role.STANDBY
    assert call(b, lambda st: (st.get("late", "net1"), ())) == []
    assert call(b, lambda st: st.allocate(alloc("c1")))[0].address == "10.0.0.1/24"
