# SPDX-License-Identifier: Apache-2.0
"""The durable-state seam of ipamd: records, batch operations, the Store Protocol.

Standard library only. A store persists what the allocator decided; it makes no
policy. ``apply`` runs a batch atomically (all or nothing) and enforces
uniqueness of (pool, ip) and of (container_id, ifname, version) itself, so a
bug above it can never hand one address to two containers.

Replicas: several ipamd processes may share one database; only the holder of
the store's writer lease may ``apply``. A lease has a fencing token that grows
at every change of holder, and every batch is committed only if the token it
was acquired with is still the current one, in the same transaction: a
deposed replica that wakes up after a pause cannot write.

Implementations: ``ipamd.store.memory.MemoryStore`` (tests) and
``ipamd.store.sql.SqlStore`` (SQLAlchemy Core on SQLite or PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class AllocationRow:
    """One address held by an attachment (or, sticky, by a pod between runs)."""

    pool: str
    ip: str
    version: int
    network: str
    container_id: str | None  # None: held for a sticky pod, no attachment
    ifname: str
    netns: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    node: str = ""
    sticky: bool = False
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class InsertAllocation:
    row: AllocationRow


@dataclass(frozen=True, slots=True)
class UpdateAllocation:
    """Replace the row with the same (pool, ip)."""

    row: AllocationRow


@dataclass(frozen=True, slots=True)
class DeleteAllocation:
    row: AllocationRow  # matched by (pool, ip)


@dataclass(frozen=True, slots=True)
class PutPool:
    name: str
    spec: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeletePool:
    name: str


@dataclass(frozen=True, slots=True)
class PutReserved:
    name: str
    spec: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeleteReserved:
    name: str


Op = (
    InsertAllocation
    | UpdateAllocation
    | DeleteAllocation
    | PutPool
    | DeletePool
    | PutReserved
    | DeleteReserved
)


@dataclass(slots=True)
class Snapshot:
    """Everything a store holds, as loaded at daemon start."""

    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    reserved: dict[str, dict[str, Any]] = field(default_factory=dict)
    allocations: list[AllocationRow] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The writer lease as last read: who holds it, its token, and how many
    seconds it has left (by the database's clock; <= 0: expired or free)."""

    holder: str
    token: int
    remaining: float


class StoreError(Exception):
    """The store could not apply a batch; nothing of it was applied."""


class StoreConflict(StoreError):
    """A uniqueness or reference constraint refused the batch."""


class StoreFenced(StoreError):
    """This process's lease was taken over: it may not write any more."""


class Store(Protocol):
    def load(self) -> Snapshot:
        """The whole durable state."""
        ...

    def apply(self, ops: Sequence[Op]) -> None:
        """Apply ``ops`` in order in one durable transaction, or raise StoreError
        having applied none of them. Once a lease was acquired, the batch is
        fenced by it (StoreFenced when it was lost) and renews it."""
        ...

    def acquire_lease(self, holder: str, ttl: float) -> LeaseView:
        """Take the writer lease if it is free, expired or already ours (a new
        token each time); the returned view names the holder either way."""
        ...

    def renew_lease(self, ttl: float) -> bool:
        """Extend our lease by ``ttl`` seconds; False if it was taken over."""
        ...

    def release_lease(self) -> None:
        """Give the lease up (a standby takes over at once); idempotent."""
        ...

    def read_lease(self) -> LeaseView: ...

    def describe(self) -> str:
        """Where the data lives, safe to show (passwords redacted)."""
        ...

    def close(self) -> None: ...
