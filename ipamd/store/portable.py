# SPDX-License-Identifier: Apache-2.0
"""A portable export of a store (``ipamd db dump`` / ``ipamd db load``).

Standard library only. The export is JSON: pools and reserved IPs as their
SpiderIPPool/SpiderReservedIP specs, allocations as the store's records. It
does not depend on the database (SQLite -> PostgreSQL and back) nor on the
schema revision, so it is also the way to move between major versions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ipamd.store import (
    AllocationRow,
    InsertAllocation,
    Op,
    PutPool,
    PutReserved,
    Snapshot,
)

FORMAT = "railyard-ipamd-dump/v1"
_FIELDS = {f.name for f in dataclasses.fields(AllocationRow)}


class DumpError(ValueError):
    """The file is not an ipamd dump this version can read."""


def to_dump(snap: Snapshot) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "pools": snap.pools,
        "reserved": snap.reserved,
        "allocations": [dataclasses.asdict(row) for row in snap.allocations],
    }


def from_dump(data: Any) -> Snapshot:
    """The snapshot a dump describes (validated for shape, not for policy)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise DumpError(f"not an ipamd dump (format {found!r}, expected {FORMAT!r})")
    snap = Snapshot(
        pools=dict(data.get("pools", {})), reserved=dict(data.get("reserved", {}))
    )
    for n, rec in enumerate(data.get("allocations", [])):
        if not isinstance(rec, dict) or not rec.keys() <= _FIELDS:
            raise DumpError(f"allocation #{n}: unexpected fields {sorted(rec)}")
        try:
            snap.allocations.append(AllocationRow(**rec))
        except TypeError as exc:
            raise DumpError(f"allocation #{n}: {exc}") from None
    return snap


def load_ops(snap: Snapshot) -> list[Op]:
    """Store operations that write ``snap`` into an empty store."""
    ops: list[Op] = [PutPool(name, spec) for name, spec in snap.pools.items()]
    ops += [PutReserved(name, spec) for name, spec in snap.reserved.items()]
    ops += [InsertAllocation(row) for row in snap.allocations]
    return ops
