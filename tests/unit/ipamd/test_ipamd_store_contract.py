# SPDX-License-Identifier: Apache-2.0
"""The Store contract, run against every backend (Flower's StateTest pattern)."""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipamd.store import (
    AllocationRow,
    DeleteAllocation,
    DeletePool,
    DeleteReserved,
    InsertAllocation,
    PutPool,
    PutReserved,
    Store,
    StoreConflict,
    StoreFenced,
    UpdateAllocation,
)
from ipamd.store.memory import MemoryStore
from ipamd.store.sql import SqlStore

SPEC = {"subnet": "10.0.0.0/24", "ips": ["10.0.0.1-10.0.0.9"]}


def row(ip: str, cid: str | None = "c1", ifname: str = "net1", **kw) -> AllocationRow:
    return AllocationRow(
        pool="p",
        ip=ip,
        version=4,
        network="n",
        container_id=cid,
        ifname=ifname,
        created_at=1.5,
        **kw,
    )


class StoreContract:
    """Behaviour every Store must have; subclasses provide ``make_store``."""

    __test__ = False

    def make_store(self) -> Store:
        raise NotImplementedError

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        s = self.make_store()
        s.apply([PutPool("p", SPEC)])
        yield s
        s.close()

    def test_inserted_allocation_is_loaded_back_field_for_field(self, store) -> None:
        r = row(
            "10.0.0.1",
            netns="/run/netns/x",
            pod_namespace="ns",
            pod_name="a",
            pod_uid="u",
            node="node1",
            sticky=True,
        )
        store.apply([InsertAllocation(r)])
        assert store.load().allocations == [r]

    def test_same_address_twice_in_a_pool_is_refused(self, store) -> None:
        store.apply([InsertAllocation(row("10.0.0.1"))])
        with pytest.raises(StoreConflict):
            store.apply([InsertAllocation(row("10.0.0.1", cid="c2"))])

    def test_same_attachment_twice_per_family_is_refused(self, store) -> None:
        store.apply([InsertAllocation(row("10.0.0.1"))])
        with pytest.raises(StoreConflict):
            store.apply([InsertAllocation(row("10.0.0.2"))])

    def test_held_addresses_without_container_may_repeat(self, store) -> None:
        store.apply(
            [
                InsertAllocation(row("10.0.0.1", cid=None)),
                InsertAllocation(row("10.0.0.2", cid=None)),
            ]
        )
        assert len(store.load().allocations) == 2

    def test_a_failing_batch_applies_nothing(self, store) -> None:
        store.apply([InsertAllocation(row("10.0.0.1"))])
        with pytest.raises(StoreConflict):
            store.apply(
                [
                    InsertAllocation(row("10.0.0.5", cid="c5")),
                    PutPool("q", SPEC),
                    InsertAllocation(row("10.0.0.1", cid="c6")),
                ]
            )
        snap = store.load()
        assert [r.ip for r in snap.allocations] == ["10.0.0.1"]
        assert list(snap.pools) == ["p"]

    def test_delete_then_reinsert_in_one_batch_keeps_order(self, store) -> None:
        store.apply([InsertAllocation(row("10.0.0.1"))])
        store.apply(
            [
                DeleteAllocation(row("10.0.0.1")),
                InsertAllocation(row("10.0.0.1", cid="c2")),
            ]
        )
        assert [r.container_id for r in store.load().allocations] == ["c2"]

    def test_update_replaces_the_row_of_that_address(self, store) -> None:
        store.apply([InsertAllocation(row("10.0.0.1", sticky=True, pod_name="w-0"))])
        held = row("10.0.0.1", cid=None, sticky=True, pod_name="w-0")
        store.apply([UpdateAllocation(held)])
        assert store.load().allocations == [held]
        with pytest.raises(StoreConflict):
            store.apply([UpdateAllocation(row("10.0.0.9"))])

    def test_allocation_in_an_unknown_pool_is_refused(self, store) -> None:
        with pytest.raises(StoreConflict):
            store.apply(
                [
                    InsertAllocation(
                        AllocationRow(
                            pool="nope",
                            ip="10.0.0.1",
                            version=4,
                            network="n",
                            container_id="c",
                            ifname="e",
                            created_at=0.0,
                        )
                    )
                ]
            )

    def test_pool_with_allocations_cannot_be_deleted(self, store) -> None:
        store.apply([InsertAllocation(row("10.0.0.1"))])
        with pytest.raises(StoreConflict):
            store.apply([DeletePool("p")])
        store.apply([DeleteAllocation(row("10.0.0.1")), DeletePool("p")])
        assert store.load().pools == {}

    def test_pools_and_reserved_ips_are_upserted_and_deleted(self, store) -> None:
        store.apply(
            [
                PutPool("p", {**SPEC, "default": True}),
                PutReserved("r", {"ipVersion": 4, "ips": ["10.0.0.3"]}),
            ]
        )
        snap = store.load()
        assert snap.pools["p"]["default"] is True
        assert snap.reserved == {"r": {"ipVersion": 4, "ips": ["10.0.0.3"]}}
        store.apply([DeleteReserved("r")])
        assert store.load().reserved == {}

    def test_update_of_several_rows_in_one_batch(self, store) -> None:
        store.apply(
            [
                InsertAllocation(row("10.0.0.1", cid="a", sticky=True, pod_name="w-0")),
                InsertAllocation(row("10.0.0.2", cid="b", sticky=True, pod_name="w-1")),
            ]
        )
        held = [
            row("10.0.0.1", cid=None, sticky=True, pod_name="w-0"),
            row("10.0.0.2", cid=None, sticky=True, pod_name="w-1"),
        ]
        store.apply([UpdateAllocation(r) for r in held])
        assert sorted(store.load().allocations, key=lambda r: r.ip) == held

    def test_a_free_lease_is_acquired_with_a_new_token(self, store) -> None:
        before = store.read_lease()
        view = store.acquire_lease("replica-a", 5.0)
        assert view.holder == "replica-a"
        assert view.token == before.token + 1
        assert view.remaining > 0
        assert store.renew_lease(5.0)

    def test_a_fenced_batch_commits_while_the_lease_is_ours(self, store) -> None:
        store.acquire_lease("replica-a", 5.0)
        store.apply([InsertAllocation(row("10.0.0.1"))])
        assert [r.ip for r in store.load().allocations] == ["10.0.0.1"]

    def test_a_released_lease_is_free_for_the_next_holder(self, store) -> None:
        store.acquire_lease("replica-a", 5.0)
        store.release_lease()
        assert store.read_lease().remaining <= 0
        assert not store.renew_lease(5.0)


class SharedStoreContract(StoreContract):
    """Two Store objects on one database: the replicas' view of the lease."""

    __test__ = False

    def test_a_held_lease_is_refused_to_another_holder(self, store) -> None:
        other = self.make_store()
        try:
            store.acquire_lease("replica-a", 30.0)
            view = other.acquire_lease("replica-b", 30.0)
            assert view.holder == "replica-a"
            assert not other.renew_lease(30.0)
        finally:
            other.close()

    def test_an_expired_lease_is_taken_over_and_fences_the_old_holder(
        self, store
    ) -> None:
        other = self.make_store()
        try:
            old = store.acquire_lease("replica-a", 0.05)
            time.sleep(0.1)
            new = other.acquire_lease("replica-b", 30.0)
            assert (new.holder, new.token) == ("replica-b", old.token + 1)
            with pytest.raises(StoreFenced):
                store.apply([InsertAllocation(row("10.0.0.1"))])
            assert not store.renew_lease(30.0)
            other.apply([InsertAllocation(row("10.0.0.2"))])
            assert [r.ip for r in other.load().allocations] == ["10.0.0.2"]
        finally:
            other.close()


class TestMemoryStore(StoreContract):
    __test__ = True

    def make_store(self) -> Store:
        return MemoryStore()


class TestSqlStoreInMemory(StoreContract):
    __test__ = True

    def make_store(self) -> Store:
        return SqlStore("sqlite://")


class TestSqlStoreFile(SharedStoreContract):
    __test__ = True

    @pytest.fixture(autouse=True)
    def _path(self, tmp_path: Path) -> None:
        self.path = tmp_path / "ipamd.db"

    def make_store(self) -> Store:
        return SqlStore(f"sqlite:///{self.path}")

    def test_state_survives_reopening_the_file(self, store) -> None:
        store.apply([InsertAllocation(row("10.0.0.1"))])
        store.close()
        again = SqlStore(f"sqlite:///{self.path}")
        try:
            assert [r.ip for r in again.load().allocations] == ["10.0.0.1"]
        finally:
            again.close()

    def test_file_uses_wal_and_full_sync(self, store) -> None:
        con = sqlite3.connect(self.path)
        try:
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            con.close()
        sync = store._conn.exec_driver_sql("PRAGMA synchronous").scalar()
        assert sync == 2  # FULL

    def test_uniqueness_is_enforced_by_the_database_itself(self, store) -> None:
        store.apply([InsertAllocation(row("10.0.0.1"))])
        con = sqlite3.connect(self.path)
        try:
            with pytest.raises(sqlite3.IntegrityError):
                con.execute(
                    "INSERT INTO allocations (pool, ip, version, network, "
                    "container_id, ifname, netns, pod_namespace, pod_name, pod_uid, "
                    "node, sticky, created_at) VALUES "
                    "('p', '10.0.0.1', 4, 'n', 'other', 'net1', '', '', '', '', '', "
                    "0, 0)"
                )
        finally:
            con.close()


FIXTURE_DB = Path(__file__).parent / "fixtures" / "ipamd-a672c3e.db"


def test_a_database_written_before_migrations_opens_with_its_data(
    tmp_path: Path,
) -> None:
    # ipamd-a672c3e.db was written by the code of commit a672c3e (two pools,
    # a reserved range, four attachments and one sticky address held for its
    # pod), before the schema was versioned.
    path = tmp_path / "old.db"
    shutil.copy(FIXTURE_DB, path)
    store = SqlStore(f"sqlite:///{path}")
    try:
        snap = store.load()
        assert sorted(snap.pools) == ["gpu1-net11", "gpu1-v6"]
        assert snap.pools["gpu1-net11"]["gateway"] == "172.16.11.254"
        assert list(snap.reserved) == ["keep-out"]
        assert len(snap.allocations) == 10
        held = [r for r in snap.allocations if r.container_id is None]
        assert {(r.ip, r.pod_name, r.sticky) for r in held} == {
            ("172.16.11.8", "p4", True),
            ("fd00:11::5", "p4", True),
        }
        # The upgraded database takes the lease and fenced writes.
        assert store.acquire_lease("replica-a", 5.0).holder == "replica-a"
        store.apply([DeleteAllocation(held[0])])
    finally:
        store.close()
    con = sqlite3.connect(path)
    try:
        assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [
            ("0002",)
        ]
        assert con.execute("SELECT count(*) FROM allocations").fetchone() == (9,)
    finally:
        con.close()
