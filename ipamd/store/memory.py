# SPDX-License-Identifier: Apache-2.0
"""MemoryStore: the Store contract in process memory (tests, dry runs).

Standard library only. Enforces the same constraints as the SQL schema so the
contract tests hold for both. Its lease is process-local (no clock): one
MemoryStore is never shared by two daemons.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

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
    StoreFenced,
    UpdateAllocation,
)


class MemoryStore:
    def __init__(self) -> None:
        self._pools: dict[str, dict[str, Any]] = {}
        self._reserved: dict[str, dict[str, Any]] = {}
        self._rows: dict[tuple[str, str], AllocationRow] = {}
        self._holder = ""
        self._token = 0
        self._mine: int | None = None  # the token acquired through this object

    def load(self) -> Snapshot:
        return Snapshot(
            pools=copy.deepcopy(self._pools),
            reserved=copy.deepcopy(self._reserved),
            allocations=list(self._rows.values()),
        )

    def apply(self, ops: Sequence[Op]) -> None:
        if self._mine is not None and self._mine != self._token:
            self._mine = None
            raise StoreFenced("the writer lease was taken over")
        # Work on copies and swap at the end: all or nothing, like a transaction.
        pools = dict(self._pools)
        reserved = dict(self._reserved)
        rows = dict(self._rows)
        for op in ops:
            if isinstance(op, InsertAllocation):
                key = (op.row.pool, op.row.ip)
                if key in rows:
                    raise StoreConflict(f"address {op.row.ip} of {op.row.pool} in use")
                if op.row.pool not in pools:
                    raise StoreConflict(f"unknown pool {op.row.pool}")
                rows[key] = op.row
                self._check_attachment(rows, op.row)
            elif isinstance(op, UpdateAllocation):
                key = (op.row.pool, op.row.ip)
                if key not in rows:
                    raise StoreConflict(f"no allocation {op.row.ip} in {op.row.pool}")
                rows[key] = op.row
                self._check_attachment(rows, op.row)
            elif isinstance(op, DeleteAllocation):
                rows.pop((op.row.pool, op.row.ip), None)
            elif isinstance(op, PutPool):
                pools[op.name] = copy.deepcopy(op.spec)
            elif isinstance(op, DeletePool):
                if any(pool == op.name for pool, _ in rows):
                    raise StoreConflict(f"pool {op.name} has allocations")
                pools.pop(op.name, None)
            elif isinstance(op, PutReserved):
                reserved[op.name] = copy.deepcopy(op.spec)
            elif isinstance(op, DeleteReserved):
                reserved.pop(op.name, None)
            else:
                raise TypeError(f"unknown store operation {op!r}")
        self._pools, self._reserved, self._rows = pools, reserved, rows

    @staticmethod
    def _check_attachment(
        rows: dict[tuple[str, str], AllocationRow], row: AllocationRow
    ) -> None:
        # UNIQUE(container_id, ifname, version) with SQL's NULL semantics.
        if row.container_id is None:
            return
        same = [
            r
            for r in rows.values()
            if r.container_id == row.container_id
            and r.ifname == row.ifname
            and r.version == row.version
        ]
        if len(same) > 1:
            raise StoreConflict(
                f"container {row.container_id} ifname {row.ifname} already holds "
                f"an IPv{row.version} address"
            )

    def acquire_lease(self, holder: str, ttl: float) -> LeaseView:
        if not self._holder or self._holder == holder:
            self._holder = holder
            self._token += 1
            self._mine = self._token
        return self.read_lease()

    def renew_lease(self, ttl: float) -> bool:
        if self._mine is not None and self._mine != self._token:
            self._mine = None
        return self._mine is not None

    def release_lease(self) -> None:
        if self._mine is not None and self._mine == self._token:
            self._holder = ""
        self._mine = None

    def read_lease(self) -> LeaseView:
        return LeaseView(
            self._holder, self._token, float("inf") if self._holder else 0.0
        )

    def describe(self) -> str:
        return "memory"

    def close(self) -> None:
        pass


_: Store = MemoryStore()
