# SPDX-License-Identifier: Apache-2.0
"""Pool administration: create, update and delete SpiderIPPools and
SpiderReservedIPs, and report their usage. The operator's side, apart from the
allocation policy in ``ipamd.allocator``.

Standard library only. The functions work on the engine's ``AllocState`` the
way its allocation methods do: validate first, then change the state and
return the store operations that make the change durable; a function that
raises has changed nothing. Validation of a pool on its own is
``ipamd.pools``'s; here are the rules about the set of pools and about what
is allocated (Spiderpool refuses to drop an address in use, or a pool in use).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ipamd import ranges
from ipamd.allocator import AllocState
from ipamd.errors import Conflict, InvalidRequest, NotFound
from ipamd.pools import (
    Pool,
    ReservedIP,
    check_pool_set,
    check_update,
    pool_to_spec,
    reserved_to_spec,
)
from ipamd.store import DeletePool, DeleteReserved, Op, PutPool, PutReserved


@dataclass(slots=True)
class ApplyResult:
    created: list[str] = field(default_factory=list)
    configured: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PoolUsage:
    pool: Pool
    total: int
    allocated: int


def apply_pools(
    state: AllocState,
    pools: Sequence[Pool],
    reserved: Sequence[ReservedIP],
    dry_run: bool = False,
) -> tuple[ApplyResult, list[Op]]:
    """Create or update pools and reserved IPs, all or nothing."""
    result = ApplyResult()
    new_pools = dict(state.pools)
    changed: list[Pool] = []
    seen: set[str] = set()
    for pool in pools:
        if pool.name in seen:
            raise InvalidRequest(f"SpiderIPPool {pool.name} given twice")
        seen.add(pool.name)
        old = state.pools.get(pool.name)
        label = f"SpiderIPPool/{pool.name}"
        if old is None:
            result.created.append(label)
        elif old == pool:
            result.unchanged.append(label)
            continue
        else:
            check_update(old, pool)
            _check_in_use(state, old, pool)
            result.configured.append(label)
        new_pools[pool.name] = pool
        changed.append(pool)
    check_pool_set(new_pools.values())
    new_reserved = dict(state.reserved)
    changed_res: list[ReservedIP] = []
    seen_res: set[str] = set()
    for res in reserved:
        label = f"SpiderReservedIP/{res.name}"
        if res.name in seen_res:
            raise InvalidRequest(f"SpiderReservedIP {res.name} given twice")
        seen_res.add(res.name)
        old_res = state.reserved.get(res.name)
        if old_res == res:
            result.unchanged.append(label)
            continue
        (result.created if old_res is None else result.configured).append(label)
        new_reserved[res.name] = res
        changed_res.append(res)
    ops: list[Op] = [PutPool(p.name, pool_to_spec(p)) for p in changed]
    ops += [PutReserved(r.name, reserved_to_spec(r)) for r in changed_res]
    if dry_run or not ops:
        return result, []
    families = {r.version for r in changed_res}
    for res in changed_res:
        old_res = state.reserved.get(res.name)
        if old_res is not None:
            families.add(old_res.version)
    state.pools = new_pools
    state.reserved = new_reserved
    for pool in state.pools.values():
        if pool in changed or pool.version in families:
            state.index[pool.name] = state.build_index(pool)
    return result, ops


def _check_in_use(state: AllocState, old: Pool, new: Pool) -> None:
    # Spiderpool refuses to drop an allocated address from a pool.
    for ip in sorted(state.index[old.name].used):
        if not ranges.contains(new.usable, ip):
            row = state.holder_of(old.name, ip)
            assert row is not None  # the index and the rows agree
            raise Conflict(
                f"SpiderIPPool {new.name}: cannot remove IP {row.ip} from "
                f"'spec.ips', it is allocated to container {row.container_id} "
                f"ifname {row.ifname}"
            )


def delete_pool(state: AllocState, name: str) -> list[Op]:
    pool = state.pools.get(name)
    if pool is None:
        raise NotFound(f"IPPool {name} not found")
    used = state.index[name].used_count
    if used:
        raise Conflict(
            f"IPPool {name} still has {used} allocated IPs; release them first"
        )
    del state.pools[name]
    del state.index[name]
    return [DeletePool(name)]


def delete_reserved(state: AllocState, name: str) -> list[Op]:
    res = state.reserved.pop(name, None)
    if res is None:
        raise NotFound(f"SpiderReservedIP {name} not found")
    for pool in state.pools.values():
        if pool.version == res.version:
            state.index[pool.name] = state.build_index(pool)
    return [DeleteReserved(name)]


def usage(state: AllocState, name: str) -> PoolUsage:
    pool = state.pools.get(name)
    if pool is None:
        raise NotFound(f"IPPool {name} not found")
    index = state.index[name]
    return PoolUsage(pool, index.total, index.used_count)


def list_usage(state: AllocState) -> list[PoolUsage]:
    return [usage(state, name) for name in sorted(state.pools)]
