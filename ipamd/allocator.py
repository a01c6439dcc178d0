# SPDX-License-Identifier: Apache-2.0
"""Allocation policy over in-memory state: the decisions, never the I/O.

Standard library only. ``AllocState`` holds the pools, reserved IPs, one
``FreeIndex`` per pool and the allocations, loaded from a store ``Snapshot``.
It decides allocations; changing the pools themselves (the operator's side)
is ``ipamd.pool_admin``'s, over the same state.
Each public method validates first, then mutates the state and returns the
store operations that make the change durable; a method that raises has
changed nothing. Only ``ipamd.engine``'s writer thread calls these, so there
is no locking here, and a batch whose commit fails is undone by reloading the
state from the store.

Semantics follow Spiderpool (``pkg/ipam/allocate.go``): candidate pools in the
order given per family, else the ``default: true`` pools; pools filtered by
``disable``, ``nodeName``, ``namespaceName`` and ``multusName``; first free
address in range order; idempotent per (container ID, ifname).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ipamd import ranges
from ipamd.errors import Conflict, Exhausted, InvalidRequest, NotFound
from ipamd.freeindex import FreeIndex
from ipamd.pools import (
    Pool,
    ReservedIP,
    pool_from_spec,
    reserved_from_spec,
)
from ipamd.store import (
    AllocationRow,
    DeleteAllocation,
    InsertAllocation,
    Op,
    Snapshot,
    UpdateAllocation,
)

AttachmentKey = tuple[str, str]  # (container_id, ifname)
StickyKey = tuple[str, str, str, str, int]  # (pod ns, pod name, network, ifname, v)


@dataclass(frozen=True, slots=True)
class AllocateRequest:
    network: str
    container_id: str
    ifname: str
    netns: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    node: str = ""
    ipv4_pools: tuple[str, ...] = ()
    ipv6_pools: tuple[str, ...] = ()
    requested_ips: tuple[str, ...] = ()
    sticky: bool = False
    # Spiderpool's matchMasterSubnet: of the candidate pools, the one whose
    # subnet holds an address of the VF's PF ("master") on this node.
    match_master_subnet: bool = False
    master: str = ""
    master_addresses: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Lease:
    """An allocation with its pool, as returned to clients."""

    row: AllocationRow
    pool: Pool

    @property
    def address(self) -> str:
        return f"{self.row.ip}/{self.pool.prefixlen}"


@dataclass(frozen=True, slots=True)
class NodeReconcile:
    """What a node's account released, and how many unexplained allocations
    were too young to judge (an ADD whose record the account missed)."""

    released: list[Lease]
    within_grace: int


def _ip_int(text: str) -> int:
    """The integer of a stored address. A takeover parses every row (65k in a
    full /16): inet_pton is ~10x faster than ``int(ipaddress.ip_address())``."""
    family = socket.AF_INET6 if ":" in text else socket.AF_INET
    return int.from_bytes(socket.inet_pton(family, text), "big")


def _sticky_key(row: AllocationRow) -> StickyKey:
    return (row.pod_namespace, row.pod_name, row.network, row.ifname, row.version)


class AllocState:
    """The daemon's view of pools and allocations (see module docstring)."""

    def __init__(self, snap: Snapshot, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.pools: dict[str, Pool] = {
            name: pool_from_spec(name, spec) for name, spec in snap.pools.items()
        }
        self.reserved: dict[str, ReservedIP] = {
            name: reserved_from_spec(name, spec) for name, spec in snap.reserved.items()
        }
        self.rows: dict[tuple[str, int], AllocationRow] = {}  # (pool, ip int)
        self.by_attachment: dict[AttachmentKey, list[AllocationRow]] = {}
        self.sticky: dict[StickyKey, AllocationRow] = {}
        # When this state was built, and when an attachment last got its
        # addresses here: a sticky address taken back keeps its first
        # ``created_at``, and a takeover knows nothing of ADDs in flight, so a
        # node's reconcile measures age from the latest of the three.
        self.built_at = clock()
        self.assigned_at: dict[AttachmentKey, float] = {}
        for row in snap.allocations:
            self._add_row(row)
        used: dict[str, list[int]] = {name: [] for name in self.pools}
        for name, ip in self.rows:
            used.setdefault(name, []).append(ip)
        self.index: dict[str, FreeIndex] = {}
        for pool in self.pools.values():
            self.index[pool.name] = self.build_index(pool, used=used[pool.name])

    # -- bookkeeping -------------------------------------------------------

    def _add_row(self, row: AllocationRow) -> None:
        self.rows[(row.pool, _ip_int(row.ip))] = row
        if row.container_id is not None:
            self.by_attachment.setdefault((row.container_id, row.ifname), []).append(
                row
            )
        if row.sticky and row.pod_name:
            self.sticky[_sticky_key(row)] = row

    def _drop_row(self, row: AllocationRow) -> None:
        self.rows.pop((row.pool, _ip_int(row.ip)), None)
        if row.container_id is not None:
            key = (row.container_id, row.ifname)
            held = [r for r in self.by_attachment.get(key, []) if r != row]
            if held:
                self.by_attachment[key] = held
            else:
                self.by_attachment.pop(key, None)
        if row.sticky and self.sticky.get(_sticky_key(row)) == row:
            del self.sticky[_sticky_key(row)]

    def _reserved_intervals(self, version: int) -> list[ranges.Interval]:
        return ranges.merge(
            iv for r in self.reserved.values() if r.version == version for iv in r.ips
        )

    def build_index(
        self,
        pool: Pool,
        reserved: list[ranges.Interval] | None = None,
        used: list[int] | None = None,
    ) -> FreeIndex:
        if reserved is None:
            reserved = self._reserved_intervals(pool.version)
        usable = ranges.subtract(list(pool.usable), reserved)
        if used is None:
            used = [ip for (name, ip) in self.rows if name == pool.name]
        return FreeIndex(usable, used)

    def holder_of(self, pool: str, ip: int) -> AllocationRow | None:
        """The allocation of address ``ip`` in ``pool``, if any."""
        return self.rows.get((pool, ip))

    def _lease(self, row: AllocationRow) -> Lease:
        return Lease(row, self.pools[row.pool])

    # -- CNI operations ----------------------------------------------------

    def get(self, container_id: str, ifname: str, network: str = "") -> list[Lease]:
        rows = self.by_attachment.get((container_id, ifname), [])
        return [self._lease(r) for r in rows if not network or r.network == network]

    def allocate(self, req: AllocateRequest) -> tuple[list[Lease], list[Op]]:
        """Addresses for the attachment, one per family requested."""
        for name, value in (
            ("network", req.network),
            ("container_id", req.container_id),
            ("ifname", req.ifname),
        ):
            if not value:
                raise InvalidRequest(f"{name} is required")
        existing = self.by_attachment.get((req.container_id, req.ifname))
        if existing:
            # A runtime retrying ADD gets the same addresses and no new record.
            return [self._lease(r) for r in existing], []
        wanted = self._candidates(req)
        # A sticky pod's held address that was reserved or excluded since is
        # not given back (Spiderpool: it stays only until the pod restarts);
        # it is dropped once the replacement is picked.
        stale = [
            old
            for v in wanted
            if (old := self._held_for(req, v)) is not None
            and not self.index[old.pool].usable_has(int(ipaddress.ip_address(old.ip)))
        ]
        taken: list[tuple[Pool, int, AllocationRow | None]] = []
        try:
            for version, (names, requested) in wanted.items():
                taken.append(self._pick(req, version, names, requested))
        except Exception:
            for pool, ip, old in taken:
                if old is None:
                    self.index[pool.name].release(ip)
            raise
        now = self._clock()
        self.assigned_at[(req.container_id, req.ifname)] = now
        ops: list[Op] = []
        for row in stale:
            self._drop_row(row)
            self.index[row.pool].release(int(ipaddress.ip_address(row.ip)))
            ops.append(DeleteAllocation(row))
        leases = []
        for pool, ip, old in taken:
            row = AllocationRow(
                pool=pool.name,
                ip=str(pool.address(ip)),
                version=pool.version,
                network=req.network,
                container_id=req.container_id,
                ifname=req.ifname,
                netns=req.netns,
                pod_namespace=req.pod_namespace,
                pod_name=req.pod_name,
                pod_uid=req.pod_uid,
                node=req.node,
                sticky=req.sticky and bool(req.pod_name),
                created_at=now if old is None else old.created_at,
            )
            if old is None:
                ops.append(InsertAllocation(row))
            else:
                # A sticky pod takes its address back (from a held record or
                # from its previous, dead, container).
                self._drop_row(old)
                ops.append(UpdateAllocation(row))
            self._add_row(row)
            leases.append(Lease(row, pool))
        return leases, ops

    def _candidates(
        self, req: AllocateRequest
    ) -> dict[int, tuple[list[str], list[int]]]:
        """Per family: pool names in priority order and requested addresses."""
        requested: dict[int, list[int]] = {4: [], 6: []}
        for text in req.requested_ips:
            try:
                addr = ipaddress.ip_interface(text.strip()).ip
            except ValueError as exc:
                raise InvalidRequest(f"invalid requested IP {text!r}: {exc}") from None
            requested[addr.version].append(int(addr))
        names = {
            4: self._expand(req.ipv4_pools, 4, req),
            6: self._expand(req.ipv6_pools, 6, req),
        }
        if req.match_master_subnet:
            for version in (4, 6):
                if names[version]:
                    names[version] = [self._master_pool(names[version], version, req)]
        for version, given in names.items():
            for name in given:
                pool = self.pools.get(name)
                if pool is None:
                    raise NotFound(f"IPPool {name} not found")
                if pool.version != version:
                    raise InvalidRequest(
                        f"IPPool {name} is an IPv{pool.version} pool, requested as "
                        f"IPv{version}"
                    )
        if not names[4] and not names[6]:
            # Spiderpool's last resort: the cluster's `default: true` pools.
            for pool in sorted(self.pools.values(), key=lambda p: p.name):
                if pool.default:
                    names[pool.version].append(pool.name)
        for version in (4, 6):
            if requested[version] and not names[version]:
                # A requested address without a pool list: the pool holding it.
                names[version] = [
                    p.name
                    for p in sorted(self.pools.values(), key=lambda p: p.name)
                    if p.version == version
                    and any(ranges.contains(p.usable, ip) for ip in requested[version])
                ]
                if not names[version]:
                    shown = ipaddress.ip_address(requested[version][0])
                    raise InvalidRequest(f"requested IP {shown} is in no IPPool")
        wanted = {
            v: (names[v], requested[v]) for v in (4, 6) if names[v] or requested[v]
        }
        if not wanted:
            raise InvalidRequest(
                "no IPPool requested and no default IPPool exists "
                "(set default_ipv4_ippool/default_ipv6_ippool)"
            )
        return wanted

    def _expand(
        self, given: tuple[str, ...], version: int, req: AllocateRequest
    ) -> list[str]:
        """Pool names with each wildcard (``eno3np1-rail1*``) replaced by the
        pools of ``version`` it matches that may serve this node, by name.

        A wildcard is how one network serves per-node pools (Spiderpool's
        RoCE guide, Solution 2); one that leaves no pool for this node is an
        error naming the node, rather than an empty list that would fall back
        to the default pools.
        """
        out: list[str] = []
        for name in given:
            if not any(c in name for c in "*?["):
                out.append(name)
                continue
            matched = sorted(
                p.name
                for p in self.pools.values()
                if p.version == version and fnmatch.fnmatchcase(p.name, name)
            )
            fit = [n for n in matched if self._unfit(self.pools[n], req) is None]
            if not fit:
                raise NotFound(
                    f"no IPv{version} IPPool matching {name!r} may serve node "
                    f"{req.node!r}"
                    + (
                        f" (matched {', '.join(matched)}: "
                        + "; ".join(
                            f"{n} {self._unfit(self.pools[n], req)}" for n in matched
                        )
                        + ")"
                        if matched
                        else ""
                    )
                )
            out += [n for n in fit if n not in out]
        return out

    def _master_pool(self, names: list[str], version: int, req: AllocateRequest) -> str:
        """matchMasterSubnet: the one candidate whose subnet holds an address
        of the master (the VF's PF) on this node; an error naming the node,
        the master and the candidates when none or several do."""
        addrs = []
        for text in req.master_addresses:
            try:
                addrs.append(ipaddress.ip_interface(text).ip)
            except ValueError:
                raise InvalidRequest(f"invalid master address {text!r}") from None
        mine = [a for a in addrs if a.version == version]
        holding = [
            n
            for n in names
            if n in self.pools and any(a in self.pools[n].subnet for a in mine)
        ]
        where = f"node {req.node!r}, master {req.master or '?'}"
        shown = ", ".join(
            f"{n} ({self.pools[n].subnet})" if n in self.pools else n for n in names
        )
        if len(holding) == 1:
            return holding[0]
        if not holding:
            has = ", ".join(str(a) for a in mine) or f"no IPv{version} address"
            raise NotFound(
                f"matchMasterSubnet: no candidate IPPool holds the master's subnet "
                f"({where} has {has}); candidates: {shown}"
            )
        raise Conflict(
            f"matchMasterSubnet: several candidate IPPools hold the master's "
            f"subnet ({where}): {', '.join(holding)}; the pools overlap or the "
            "master has addresses in several"
        )

    def _held_for(self, req: AllocateRequest, version: int) -> AllocationRow | None:
        """The sticky pod's address of this family, if the request is sticky."""
        if not (req.sticky and req.pod_name):
            return None
        key = (req.pod_namespace, req.pod_name, req.network, req.ifname, version)
        return self.sticky.get(key)

    def _unfit(self, pool: Pool, req: AllocateRequest) -> str | None:
        """Why ``pool`` may not serve ``req`` (Spiderpool's filters), or None."""
        if pool.disable:
            return "disabled"
        if pool.node_name and req.node not in pool.node_name:
            return f"nodeName {list(pool.node_name)} excludes node {req.node!r}"
        if pool.namespace_name and req.pod_namespace not in pool.namespace_name:
            return (
                f"namespaceName {list(pool.namespace_name)} excludes namespace "
                f"{req.pod_namespace!r}"
            )
        if pool.multus_name and not any(
            req.network in (m, m.rpartition("/")[2]) for m in pool.multus_name
        ):
            return f"multusName {list(pool.multus_name)} excludes {req.network!r}"
        return None

    def _pick(
        self,
        req: AllocateRequest,
        version: int,
        names: list[str],
        requested: list[int],
    ) -> tuple[Pool, int, AllocationRow | None]:
        reasons = []
        if requested:
            ip = requested[0]
            shown = ipaddress.ip_address(ip)
            for name in names:
                pool = self.pools[name]
                if not ranges.contains(pool.usable, ip):
                    continue
                why = self._unfit(pool, req)
                if why:
                    raise Conflict(f"requested IP {shown}: IPPool {name} is {why}")
                if self.index[name].take_specific(ip):
                    return pool, ip, None
                holder = self.rows.get((name, ip))
                if holder is not None:
                    raise Conflict(
                        f"requested IP {shown} of IPPool {name} is in use by "
                        f"container {holder.container_id} ifname {holder.ifname}"
                    )
                raise Conflict(f"requested IP {shown} of IPPool {name} is reserved")
            raise InvalidRequest(
                f"requested IP {shown} is in none of the IPPools {names}"
            )
        old = self._held_for(req, version)
        if old is not None and old.pool in names:
            value = int(ipaddress.ip_address(old.ip))
            if self.index[old.pool].usable_has(value):
                return self.pools[old.pool], value, old
        for name in names:
            pool = self.pools[name]
            why = self._unfit(pool, req)
            if why:
                reasons.append(f"{name}: {why}")
                continue
            index = self.index[name]
            got = index.take()
            if got is not None:
                return pool, got, None
            reasons.append(
                f"{name}: exhausted ({index.used_count}/{index.total} addresses used)"
            )
        raise Exhausted(
            f"no IPv{version} address available in IPPools {names} "
            f"({'; '.join(reasons)})"
        )

    def release(
        self, network: str, container_id: str, ifname: str
    ) -> tuple[list[AllocationRow], list[Op]]:
        """Free the attachment's addresses; sticky ones stay held for the pod."""
        rows = [
            r
            for r in self.by_attachment.get((container_id, ifname), [])
            if not network or r.network == network
        ]
        ops: list[Op] = []
        for row in rows:
            ops.append(self._release_row(row))
        return rows, ops

    def _release_row(self, row: AllocationRow) -> Op:
        self._drop_row(row)
        if row.container_id and not self.by_attachment.get(
            (row.container_id, row.ifname)
        ):
            self.assigned_at.pop((row.container_id, row.ifname), None)
        if row.sticky and row.container_id is not None:
            held = replace(row, container_id=None, netns="")
            self._add_row(held)
            return UpdateAllocation(held)
        self.index[row.pool].release(int(ipaddress.ip_address(row.ip)))
        return DeleteAllocation(row)

    def gc(
        self, network: str, valid: Iterable[AttachmentKey]
    ) -> tuple[list[AllocationRow], list[Op]]:
        """CNI GC: release attachments (of ``network``) not in ``valid``."""
        keep = set(valid)
        rows = [
            r
            for key, rs in self.by_attachment.items()
            if key not in keep
            for r in rs
            if not network or r.network == network
        ]
        return rows, [self._release_row(r) for r in rows]

    def reconcile_node(
        self,
        node: str,
        held: Iterable[AttachmentKey],
        networks: Iterable[str],
        grace: float,
        dry_run: bool = False,
    ) -> tuple[NodeReconcile, list[Op]]:
        """A node's account of its attachments: release the allocations of
        ``node`` in ``networks`` that no attachment in ``held`` explains and
        that are older than ``grace`` seconds (see ``NodeReconcile``)."""
        if not node:
            raise InvalidRequest("node is required")
        keep, scope = set(held), set(networks)
        now = self._clock()
        unexplained = [
            row
            for key, rows in self.by_attachment.items()
            if key not in keep
            for row in rows
            if row.node == node and row.network in scope
        ]
        old = [r for r in unexplained if now - self._assigned(r) >= grace]
        outcome = NodeReconcile(
            [self._lease(r) for r in old], len(unexplained) - len(old)
        )
        if dry_run:
            return outcome, []
        return outcome, [self._release_row(r) for r in old]

    def _assigned(self, row: AllocationRow) -> float:
        key = (row.container_id or "", row.ifname)
        return max(row.created_at, self.assigned_at.get(key, 0.0), self.built_at)

    def release_admin(
        self, container_id: str, ifname: str, pool: str, ip: str
    ) -> tuple[list[AllocationRow], list[Op]]:
        """Operator release: an attachment, or one address (also a held one)."""
        if pool or ip:
            if not (pool and ip):
                raise InvalidRequest("release by address needs both pool and ip")
            try:
                value = int(ipaddress.ip_address(ip))
            except ValueError as exc:
                raise InvalidRequest(f"invalid ip {ip!r}: {exc}") from None
            row = self.rows.get((pool, value))
            if row is None:
                raise NotFound(f"no allocation of {ip} in IPPool {pool}")
            rows = [row]
        else:
            if not (container_id and ifname):
                raise InvalidRequest("give container_id and ifname, or pool and ip")
            rows = list(self.by_attachment.get((container_id, ifname), []))
            if not rows:
                raise NotFound(
                    f"no allocation for container {container_id} ifname {ifname}"
                )
        ops: list[Op] = []
        for row in rows:
            # The operator wants the address back: never keep it held.
            self._drop_row(row)
            self.index[row.pool].release(int(ipaddress.ip_address(row.ip)))
            ops.append(DeleteAllocation(row))
        return rows, ops

    def list_rows(
        self,
        network: str = "",
        pool: str = "",
        container_id: str = "",
        pod_namespace: str = "",
        pod_name: str = "",
        node: str = "",
    ) -> list[Lease]:
        out = []
        for (name, _ip), row in sorted(self.rows.items()):
            if (
                (network and row.network != network)
                or (pool and name != pool)
                or (container_id and row.container_id != container_id)
                or (pod_namespace and row.pod_namespace != pod_namespace)
                or (pod_name and row.pod_name != pod_name)
                or (node and row.node != node)
            ):
                continue
            out.append(self._lease(row))
        return out
