# SPDX-License-Identifier: Apache-2.0
"""The single-writer engine: group commit, ack after commit, failure recovery."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from ipamd.allocator import AllocateRequest
from ipamd.engine import Engine
from ipamd.errors import Exhausted, Unavailable
from ipamd.manifest import parse_manifest
from ipamd.store import Op, StoreError
from ipamd.store.memory import MemoryStore

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


@pytest.fixture
def engine():
    store = GatedStore()
    eng = Engine(store)
    pools, reserved = parse_manifest(POOL)
    eng.call(lambda st: st.apply(pools, reserved), 5)
    try:
        yield eng, store
    finally:
        store.gate.set()
        eng.stop()


def test_requests_queued_during_a_commit_share_the_next_commit(engine) -> None:
    eng, store = engine
    store.gate.clear()
    store.entered.clear()
    first = eng.submit(lambda st: st.allocate(alloc("c0")))
    assert store.entered.wait(5)  # the writer is inside the first commit
    rest = [
        eng.submit(lambda st, n=n: st.allocate(alloc(f"c{n}"))) for n in range(1, 50)
    ]
    assert not first.done()  # not acknowledged before its commit
    store.gate.set()
    addresses = {f.result(5)[0].address for f in [first, *rest]}
    assert len(addresses) == 50
    assert store.batches[-2:] == [1, 49]


def test_a_failing_job_does_not_disturb_its_batch(engine) -> None:
    eng, store = engine
    store.gate.clear()
    store.entered.clear()
    blocker = eng.submit(lambda st: (None, ()))
    bad = eng.submit(
        lambda st: st.allocate(
            AllocateRequest(
                network="n", container_id="x", ifname="net1", ipv4_pools=("nope",)
            )
        )
    )
    good = eng.submit(lambda st: st.allocate(alloc("ok")))
    store.gate.set()
    blocker.result(5)
    with pytest.raises(Exception, match="IPPool nope not found"):
        bad.result(5)
    assert good.result(5)[0].address == "10.0.0.1/24"


def test_failed_commit_fails_the_batch_and_restores_state(engine) -> None:
    eng, store = engine
    eng.call(lambda st: st.allocate(alloc("kept")), 5)
    store.fail = True
    with pytest.raises(Unavailable, match="nothing changed: disk full"):
        eng.call(lambda st: st.allocate(alloc("lost")), 5)
    store.fail = False
    assert eng.state.get("lost", "net1") == []
    # The address the failed batch had picked is free again.
    leases = eng.call(lambda st: st.allocate(alloc("next")), 5)
    assert leases[0].address == "10.0.0.2/24"


def test_exhaustion_raises_to_the_caller(engine) -> None:
    eng, _ = engine
    for n in range(100):
        eng.call(lambda st, n=n: st.allocate(alloc(f"c{n}")), 5)
    with pytest.raises(Exhausted):
        eng.call(lambda st: st.allocate(alloc("one-too-many")), 5)


def test_stopped_engine_refuses_new_work(engine) -> None:
    eng, _ = engine
    eng.stop()
    with pytest.raises(Unavailable):
        eng.call(lambda st: (None, ()), 1)


def test_a_bug_in_a_batch_fails_it_and_keeps_the_writer_alive(engine) -> None:
    eng, store = engine

    class Unloggable:
        """An op the store cannot apply and does not expect (a bug)."""

    with pytest.raises(Unavailable, match="internal error"):
        eng.call(lambda st: (None, [Unloggable()]), 5)
    assert eng.alive
    assert eng.call(lambda st: st.allocate(alloc("after")), 5)[0].address
