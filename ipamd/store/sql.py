# SPDX-License-Identifier: Apache-2.0
"""SqlStore: the Store contract on SQLAlchemy Core, for SQLite and PostgreSQL.

Server-only (imports sqlalchemy; alembic when opening). One access path for
every operation: Core statements on one ``Connection`` inside
``Connection.begin()``; executemany of plain dicts for the batch path (on
PostgreSQL SQLAlchemy sends those as multi-row INSERTs). Design:

- One connection, used by the daemon's single writer thread. Many writer
  connections on one SQLite file serialise in the busy handler and stall for
  seconds under load; one writer batching many requests per commit (group
  commit) is both faster and simpler, and the same on PostgreSQL.
- SQLite: ``BEGIN IMMEDIATE`` emitted by us: pysqlite defers BEGIN until the
  first write, which would let a reader upgrade lock late (SQLAlchemy's
  documented SQLite recipe: isolation_level=None on connect, BEGIN in the
  "begin" event). WAL + ``synchronous=FULL``: a commit returns only after the
  WAL is fsync'd, so an acknowledged allocation survives SIGKILL and power
  loss. PostgreSQL's defaults (``synchronous_commit=on``) give the same.
- UNIQUE(pool, ip) and UNIQUE(container_id, ifname, version) in the schema:
  the database, not only Python, refuses a double allocation. A held sticky
  address has container_id NULL, which UNIQUE lets repeat (SQL semantics).
- The writer lease (``ipamd_lease``, one row): the first statement of every
  fenced batch is ``UPDATE ipamd_lease ... WHERE token = <ours>``. It takes
  the row lock, so a takeover (which also updates that row) is ordered
  strictly before or after the batch: either the batch commits and the
  takeover then sees a renewed lease, or the takeover committed first and the
  batch matches no row and rolls back.
- A connection the database dropped is replaced at the next operation, so a
  restarted or failed-over PostgreSQL is picked up again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from itertools import groupby
from pathlib import Path
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
    LeaseView,
    Op,
    PutPool,
    PutReserved,
    Snapshot,
    Store,
    StoreConflict,
    StoreError,
    StoreFenced,
    UpdateAllocation,
)
from ipamd.store.schema import (
    LEASE_ID,
    allocations_table,
    lease_table,
    pools_table,
    reserved_table,
)

MIGRATIONS = Path(__file__).parent / "migrations"
log = logging.getLogger(__name__)

# Any 64-bit key: serialises concurrent migrations of replicas starting at once.
_MIGRATION_LOCK = 0x7261696C79617264  # "railyard"
#: PostgreSQL's view of the locks held and awaited (the columns read here).
_LOCKS = sa.table(
    "pg_locks",
    sa.column("locktype"),
    sa.column("relation"),
    sa.column("granted", sa.Boolean),
    sa.column("mode"),
    sa.column("pid"),
)

# The allocations columns named like the record's fields, in its order.
_ROW_FIELDS = tuple(f.name for f in fields(AllocationRow))

_t = allocations_table
_BY_ADDRESS = sa.and_(
    _t.c.pool == sa.bindparam("k_pool"), _t.c.ip == sa.bindparam("k_ip")
)
_INSERT = _t.insert()
_DELETE = _t.delete().where(_BY_ADDRESS)
_UPDATE = _t.update().where(_BY_ADDRESS)
_ALLOCATION_OPS = (InsertAllocation, DeleteAllocation, UpdateAllocation)


def _row_dict(row: AllocationRow) -> dict[str, Any]:
    return {name: getattr(row, name) for name in _ROW_FIELDS}


def _key(row: AllocationRow) -> dict[str, Any]:
    return {"k_pool": row.pool, "k_ip": row.ip}


def _rows(ops: Sequence[Op]) -> list[AllocationRow]:
    return [op.row for op in ops if isinstance(op, _ALLOCATION_OPS)]


def _is_memory(url: str) -> bool:
    return url in ("sqlite://", "sqlite:///:memory:")


def make_engine(url: str) -> Engine:
    """An engine with ipamd's connection settings for the URL's database."""
    kwargs: dict[str, Any] = {}
    is_sqlite = url.startswith("sqlite")
    if is_sqlite:
        # The writer thread is not the thread that opened the store.
        kwargs["connect_args"] = {"check_same_thread": False}
        if _is_memory(url):
            kwargs["poolclass"] = StaticPool  # one shared in-memory database
    elif url.startswith("postgresql"):
        # A dead peer must fail an operation within seconds (so the lease
        # logic can act), not after the kernel's 2-hour keepalive default.
        kwargs["connect_args"] = {
            "connect_timeout": 2,
            "keepalives": 1,
            "keepalives_idle": 2,
            "keepalives_interval": 1,
            "keepalives_count": 2,
            "tcp_user_timeout": 3000,
            "application_name": "ipamd",
            # A replica paused mid-transaction (SIGSTOP, a VM freeze) holds
            # the lease row's lock; the server ends such a session so a
            # standby's takeover is not blocked behind it.
            "options": "-c idle_in_transaction_session_timeout=2000",
        }
        kwargs["pool_pre_ping"] = True
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


def migrate(conn: Connection) -> None:
    """Create or upgrade the schema to the newest revision (Alembic).

    A database written before migrations existed has the tables of revision
    0001 and no ``alembic_version``: it is stamped 0001, then upgraded.
    """
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    with conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
        tables = set(sa.inspect(conn).get_table_names())
        if "alembic_version" not in tables and "allocations" in tables:
            command.stamp(cfg, "0001")
        command.upgrade(cfg, "head")


def _db_now(dialect: str) -> sa.ColumnElement[float]:
    """Seconds since the epoch on the database server's clock."""
    if dialect == "postgresql":
        # clock_timestamp, not now(): now() is frozen at transaction start.
        return sa.literal_column("extract(epoch from clock_timestamp())::float8")
    return sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)")


class SqlStore:
    """Store on a SQLAlchemy URL: ``sqlite:////var/lib/railyard/ipamd.db`` or
    ``postgresql+psycopg://user:password@host/db``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine = make_engine(url)
        self._now = _db_now(self._engine.dialect.name)
        self._pg = self._engine.dialect.name == "postgresql"
        self._conn: Connection | None = None
        self._token: int | None = None  # our lease's token, once acquired
        self._ttl = 0.0
        # Built once: it runs in every commit, and a statement built per call
        # costs SQLAlchemy a cache-key walk each time.
        lease = lease_table
        self._fence = (
            lease.update()
            .where(lease.c.id == LEASE_ID, lease.c.token == sa.bindparam("b_token"))
            .values(expires_at=self._now + sa.bindparam("b_ttl", type_=sa.Float))
        )
        try:
            with self._engine.connect() as conn:
                migrate(conn)
        except sa.exc.SQLAlchemyError as exc:
            self._engine.dispose()
            raise StoreError(f"cannot open {self.describe()}: {exc}") from exc

    # -- plumbing ----------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """One transaction on the writer connection, errors as StoreError."""
        if self._conn is None or self._conn.invalidated:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            try:
                self._conn = self._engine.connect()
            except sa.exc.SQLAlchemyError as exc:
                raise StoreError(f"cannot connect to {self.describe()}: {exc}") from exc
        conn = self._conn
        try:
            with conn.begin():
                yield conn
        except sa.exc.IntegrityError as exc:
            raise StoreConflict(str(exc.orig)) from exc
        except sa.exc.SQLAlchemyError as exc:
            if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
                conn.close()
                self._conn = None
            raise StoreError(str(exc)) from exc

    def describe(self) -> str:
        return self._engine.url.render_as_string(hide_password=True)

    # -- data --------------------------------------------------------------

    def load(self) -> Snapshot:
        snap = Snapshot()
        with self._transaction() as conn:
            if self._pg:
                # One snapshot across the three SELECTs (READ COMMITTED
                # would let a concurrent writer slip in between them).
                conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            for name, spec in conn.execute(sa.select(pools_table)):
                snap.pools[name] = json.loads(spec)
            for name, spec in conn.execute(sa.select(reserved_table)):
                snap.reserved[name] = json.loads(spec)
            cols = [_t.c[name] for name in _ROW_FIELDS]
            result = conn.execute(sa.select(*cols).order_by(_t.c.id))
            # Positional: the columns are selected in the record's field order.
            snap.allocations = [AllocationRow(*rec) for rec in result.all()]
        return snap

    def apply(self, ops: Sequence[Op]) -> None:
        if not ops:
            return
        with self._transaction() as conn:
            if self._token is not None and not self._extend(conn, self._ttl):
                self._token = None
                raise StoreFenced("the writer lease was taken over by another ipamd")
            # Consecutive ops of one kind become one executemany; order is
            # kept, so a release and a re-allocation of one address in the
            # same batch run delete-then-insert.
            for kind, group in groupby(ops, key=type):
                items = list(group)
                if kind is InsertAllocation:
                    conn.execute(_INSERT, [_row_dict(r) for r in _rows(items)])
                elif kind is DeleteAllocation:
                    conn.execute(_DELETE, [_key(r) for r in _rows(items)])
                elif kind is UpdateAllocation:
                    for op in items:
                        assert isinstance(op, UpdateAllocation)
                        res = conn.execute(
                            _UPDATE, {**_row_dict(op.row), **_key(op.row)}
                        )
                        if res.rowcount != 1:
                            raise StoreConflict(
                                f"no allocation {op.row.ip} in {op.row.pool}"
                            )
                else:
                    for op in items:
                        self._apply_config(conn, op)

    @staticmethod
    def _apply_config(conn: Connection, op: Op) -> None:
        if isinstance(op, PutPool | PutReserved):
            table = pools_table if isinstance(op, PutPool) else reserved_table
            spec = json.dumps(op.spec, sort_keys=True)
            res = conn.execute(
                table.update().where(table.c.name == op.name).values(spec=spec)
            )
            if res.rowcount == 0:
                conn.execute(table.insert().values(name=op.name, spec=spec))
        elif isinstance(op, DeletePool):
            conn.execute(pools_table.delete().where(pools_table.c.name == op.name))
        elif isinstance(op, DeleteReserved):
            conn.execute(
                reserved_table.delete().where(reserved_table.c.name == op.name)
            )
        else:
            raise TypeError(f"unknown store operation {op!r}")

    # -- the writer lease --------------------------------------------------

    def _extend(self, conn: Connection, ttl: float) -> bool:
        res = conn.execute(self._fence, {"b_token": self._token, "b_ttl": ttl})
        return res.rowcount == 1

    def acquire_lease(self, holder: str, ttl: float) -> LeaseView:
        lease = lease_table
        if self._pg:
            self._end_stalled_holders()
        with self._transaction() as conn:
            if self._pg:
                # Never wait behind the row's lock for longer than a lease:
                # a holder stalled there is ended by the next attempt.
                conn.exec_driver_sql(
                    f"SET LOCAL lock_timeout = {max(1, int(ttl * 1000))}"
                )
            res = conn.execute(
                lease.update()
                .where(
                    lease.c.id == LEASE_ID,
                    sa.or_(lease.c.expires_at <= self._now, lease.c.holder == holder),
                )
                .values(
                    holder=holder, token=lease.c.token + 1, expires_at=self._now + ttl
                )
            )
            view = self._read(conn)
        if res.rowcount == 1:
            self._token, self._ttl = view.token, ttl
        return view

    def _end_stalled_holders(self) -> None:
        """End the sessions that hold the lease row locked after the lease expired.

        A replica paused mid-transaction (SIGSTOP, a VM freeze) keeps that
        lock. ``idle_in_transaction_session_timeout`` ends it only when it was
        paused between statements; paused in the middle of a pipelined batch
        the server counts it active, and a standby would wait behind it for as
        long as the pause lasts. Its lease has expired, so whatever it has in
        flight must fail anyway: the fence exists for exactly that.
        """
        expired = sa.exists().where(
            lease_table.c.id == LEASE_ID, lease_table.c.expires_at <= self._now
        )
        with self._transaction() as conn:
            ended = conn.execute(
                sa.select(sa.func.pg_terminate_backend(_LOCKS.c.pid)).where(
                    _LOCKS.c.locktype == "relation",
                    _LOCKS.c.relation
                    == sa.literal_column(f"'{lease_table.name}'::regclass"),
                    _LOCKS.c.granted,
                    _LOCKS.c.mode == "RowExclusiveLock",
                    _LOCKS.c.pid != sa.func.pg_backend_pid(),
                    expired,
                )
            ).fetchall()
        if ended:
            log.warning(
                "ended %d database session(s) holding the expired writer lease's row",
                len(ended),
            )

    def renew_lease(self, ttl: float) -> bool:
        if self._token is None:
            return False
        with self._transaction() as conn:
            kept = self._extend(conn, ttl)
        if not kept:
            self._token = None
        else:
            self._ttl = ttl
        return kept

    def release_lease(self) -> None:
        if self._token is None:
            return
        lease = lease_table
        with self._transaction() as conn:
            conn.execute(
                lease.update()
                .where(lease.c.id == LEASE_ID, lease.c.token == self._token)
                .values(expires_at=0.0)
            )
        self._token = None

    def read_lease(self) -> LeaseView:
        with self._transaction() as conn:
            return self._read(conn)

    def _read(self, conn: Connection) -> LeaseView:
        lease = lease_table
        holder, token, remaining = conn.execute(
            sa.select(
                lease.c.holder, lease.c.token, lease.c.expires_at - self._now
            ).where(lease.c.id == LEASE_ID)
        ).one()
        return LeaseView(holder, int(token), float(remaining))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._engine.dispose()


_: type[Store] = SqlStore
