# SPDX-License-Identifier: Apache-2.0
"""SqlStore: the Store contract on SQLAlchemy Core (SQLite by default).

Server-only (imports sqlalchemy). Design:
- One connection, used by the daemon's single writer thread. Many writer
  connections on one SQLite file serialise in the busy handler and stall for
  seconds under load; one writer batching many requests per commit (group
  commit) is both faster and simpler.
- ``BEGIN IMMEDIATE`` emitted by us: pysqlite defers BEGIN until the first
  write, which would let a reader upgrade lock late (SQLAlchemy's documented
  SQLite recipe: isolation_level=None on connect, BEGIN in the "begin" event).
- WAL + ``synchronous=FULL``: a commit returns only after the WAL is fsync'd,
  so an acknowledged allocation survives SIGKILL and power loss.
- UNIQUE(pool, ip) and UNIQUE(container_id, ifname, version) in the schema:
  the database, not only Python, refuses a double allocation. A held sticky
  address has container_id NULL, which UNIQUE lets repeat (SQL semantics).
- Core, not the ORM, on the batch path: executemany of plain dicts.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import fields
from itertools import groupby
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from ipamd.store import (
    AllocationRow,
    DeleteAllocation,
    DeletePool,
    DeleteReserved,
    InsertAllocation,
    Op,
    PutPool,
    PutReserved,
    Snapshot,
    Store,
    StoreConflict,
    StoreError,
    UpdateAllocation,
)

metadata = sa.MetaData()

pools_table = sa.Table(
    "pools",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("spec", sa.Text, nullable=False),  # SpiderIPPool spec as JSON
)

reserved_table = sa.Table(
    "reserved_ips",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("spec", sa.Text, nullable=False),
)

allocations_table = sa.Table(
    "allocations",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "pool",
        sa.String,
        sa.ForeignKey("pools.name", ondelete="RESTRICT"),
        nullable=False,
    ),
    sa.Column("ip", sa.String, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("network", sa.String, nullable=False),
    sa.Column("container_id", sa.String, nullable=True),
    sa.Column("ifname", sa.String, nullable=False),
    sa.Column("netns", sa.String, nullable=False, default=""),
    sa.Column("pod_namespace", sa.String, nullable=False, default=""),
    sa.Column("pod_name", sa.String, nullable=False, default=""),
    sa.Column("pod_uid", sa.String, nullable=False, default=""),
    sa.Column("node", sa.String, nullable=False, default=""),
    sa.Column("sticky", sa.Boolean, nullable=False, default=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.UniqueConstraint("pool", "ip", name="uq_pool_ip"),
    sa.UniqueConstraint(
        "container_id", "ifname", "version", name="uq_attachment_family"
    ),
)

# The allocations columns named like the record's fields, in its order.
_ROW_FIELDS = tuple(f.name for f in fields(AllocationRow))


def _row_dict(row: AllocationRow) -> dict[str, Any]:
    return {name: getattr(row, name) for name in _ROW_FIELDS}


def _row_tuple(row: AllocationRow) -> tuple[Any, ...]:
    return tuple(getattr(row, name) for name in _ROW_FIELDS)


_INSERT_SQL = (
    f"INSERT INTO allocations ({', '.join(_ROW_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _ROW_FIELDS)})"
)
_DELETE_SQL = "DELETE FROM allocations WHERE pool = ? AND ip = ?"
_UPDATE_SQL = (
    f"UPDATE allocations SET {', '.join(f'{n} = ?' for n in _ROW_FIELDS)} "
    "WHERE pool = ? AND ip = ?"
)
_ALLOCATION_OPS = (InsertAllocation, DeleteAllocation, UpdateAllocation)


def make_engine(url: str) -> Engine:
    """An engine with ipamd's SQLite pragmas and explicit BEGIN IMMEDIATE."""
    is_sqlite = url.startswith("sqlite")
    kwargs: dict[str, Any] = {}
    if is_sqlite:
        # The writer thread is not the thread that opened the store.
        kwargs["connect_args"] = {"check_same_thread": False}
        if url in ("sqlite://", "sqlite:///:memory:"):
            kwargs["poolclass"] = StaticPool  # one shared in-memory database
    engine = sa.create_engine(url, **kwargs)
    if is_sqlite:

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class SqlStore:
    """Store on a SQLAlchemy URL, e.g. ``sqlite:////var/lib/railyard/ipamd.db``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine = make_engine(url)
        metadata.create_all(self._engine)
        self._conn = self._engine.connect()
        self._sqlite = self._engine.dialect.name == "sqlite"

    def load(self) -> Snapshot:
        snap = Snapshot()
        with self._conn.begin():
            for name, spec in self._conn.execute(sa.select(pools_table)):
                snap.pools[name] = json.loads(spec)
            for name, spec in self._conn.execute(sa.select(reserved_table)):
                snap.reserved[name] = json.loads(spec)
            cols = [allocations_table.c[name] for name in _ROW_FIELDS]
            result = self._conn.execute(
                sa.select(*cols).order_by(allocations_table.c.id)
            )
            snap.allocations = [
                AllocationRow(**dict(zip(_ROW_FIELDS, rec, strict=True)))
                for rec in result
            ]
        return snap

    def apply(self, ops: Sequence[Op]) -> None:
        if not ops:
            return
        if self._sqlite and all(isinstance(op, _ALLOCATION_OPS) for op in ops):
            self._apply_allocations(ops)
            return
        t = allocations_table
        try:
            with self._conn.begin():
                # Consecutive ops of one kind become one executemany; order is
                # kept, so a release and a re-allocation of one address in the
                # same batch run delete-then-insert.
                for kind, group in groupby(ops, key=type):
                    items = list(group)
                    if kind is InsertAllocation:
                        # Plain SQL through SQLAlchemy's connection: the hot
                        # path skips statement compilation and dict binding.
                        self._conn.exec_driver_sql(
                            _INSERT_SQL,
                            [
                                _row_tuple(op.row)
                                for op in items
                                if isinstance(op, InsertAllocation)
                            ],
                        )
                    elif kind is UpdateAllocation:
                        for op in items:
                            assert isinstance(op, UpdateAllocation)
                            res = self._conn.execute(
                                t.update()
                                .where(t.c.pool == op.row.pool, t.c.ip == op.row.ip)
                                .values(**_row_dict(op.row))
                            )
                            if res.rowcount != 1:
                                raise StoreConflict(
                                    f"no allocation {op.row.ip} in {op.row.pool}"
                                )
                    elif kind is DeleteAllocation:
                        self._conn.exec_driver_sql(
                            _DELETE_SQL,
                            [
                                (op.row.pool, op.row.ip)
                                for op in items
                                if isinstance(op, DeleteAllocation)
                            ],
                        )
                    else:
                        for op in items:
                            self._apply_config(op)
        except sa.exc.IntegrityError as exc:
            raise StoreConflict(str(exc.orig)) from exc
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(str(exc)) from exc

    def _apply_allocations(self, ops: Sequence[Op]) -> None:
        """The allocate/release hot path on SQLite: the same statements on the
        DBAPI connection SQLAlchemy opened. SQLAlchemy's transaction and
        statement machinery costs ~0.3 ms of CPU per commit, as much as
        SQLite's own work; here it is one BEGIN IMMEDIATE .. COMMIT."""
        dbapi = self._conn.connection.dbapi_connection
        assert dbapi is not None
        cur = dbapi.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            try:
                for kind, group in groupby(ops, key=type):
                    rows = [op.row for op in group if isinstance(op, _ALLOCATION_OPS)]
                    if kind is InsertAllocation:
                        cur.executemany(_INSERT_SQL, [_row_tuple(r) for r in rows])
                    elif kind is DeleteAllocation:
                        cur.executemany(_DELETE_SQL, [(r.pool, r.ip) for r in rows])
                    else:
                        for r in rows:
                            cur.execute(_UPDATE_SQL, (*_row_tuple(r), r.pool, r.ip))
                            if cur.rowcount != 1:
                                raise StoreConflict(f"no allocation {r.ip} in {r.pool}")
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
        except sqlite3.IntegrityError as exc:
            raise StoreConflict(str(exc)) from exc
        except sqlite3.Error as exc:
            raise StoreError(str(exc)) from exc
        finally:
            cur.close()

    def _apply_config(self, op: Op) -> None:
        if isinstance(op, PutPool | PutReserved):
            table = pools_table if isinstance(op, PutPool) else reserved_table
            spec = json.dumps(op.spec, sort_keys=True)
            res = self._conn.execute(
                table.update().where(table.c.name == op.name).values(spec=spec)
            )
            if res.rowcount == 0:
                self._conn.execute(table.insert().values(name=op.name, spec=spec))
        elif isinstance(op, DeletePool):
            self._conn.execute(
                pools_table.delete().where(pools_table.c.name == op.name)
            )
        elif isinstance(op, DeleteReserved):
            self._conn.execute(
                reserved_table.delete().where(reserved_table.c.name == op.name)
            )
        else:
            raise TypeError(f"unknown store operation {op!r}")

    def close(self) -> None:
        self._conn.close()
        self._engine.dispose()


_: type[Store] = SqlStore
