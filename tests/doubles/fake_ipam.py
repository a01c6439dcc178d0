# SPDX-License-Identifier: Apache-2.0
"""``FakeIpam``: an in-memory ``cni.ipam.IpamClient`` with pools and failure knobs.

First-free allocation per pool, idempotent per (network, container, ifname)
like ipamd; ``fail_allocate``/``fail_release`` make the next calls raise, and
``available=False`` makes STATUS report code 50. ``freed`` records every
release that actually freed addresses, so a test can pin "released once".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

from cni.errors import IPAM_ERROR, STATUS_UNAVAILABLE
from cni.ipam import (
    Attachment,
    IpamAddress,
    IpamClient,
    IpamError,
    IpamRequest,
    IpamResult,
    IpamRoute,
)


@dataclass(frozen=True)
class FakePool:
    name: str
    subnet: str
    first: str
    last: str
    gateway: str | None = None
    routes: tuple[IpamRoute, ...] = ()


@dataclass
class FakeIpam:
    pools: dict[str, FakePool] = field(default_factory=dict)
    held: dict[tuple[str, str, str], list[IpamAddress]] = field(default_factory=dict)
    fail_allocate: IpamError | None = None
    fail_release: IpamError | None = None
    available: bool = True
    released: list[tuple[str, str, str]] = field(default_factory=list)
    #: Each release that freed something: the key and the addresses it freed.
    freed: list[tuple[tuple[str, str, str], tuple[str, ...]]] = field(
        default_factory=list
    )
    closed: int = 0
    #: As ``IpamClient.uses_interface``: a delegated dhcp would say True.
    uses_interface: bool = False

    def add_pool(self, pool: FakePool) -> None:
        self.pools[pool.name] = pool

    def _used(self) -> set[str]:
        return {a.address.split("/")[0] for ips in self.held.values() for a in ips}

    def _pick(self, pool: FakePool) -> IpamAddress:
        net = ipaddress.ip_network(pool.subnet)
        ip = ipaddress.ip_address(pool.first)
        used = self._used()
        while ip <= ipaddress.ip_address(pool.last):
            if str(ip) not in used:
                return IpamAddress(
                    f"{ip}/{net.prefixlen}", pool.gateway, pool.name, net.version
                )
            ip += 1
        raise IpamError(IPAM_ERROR, f"pool {pool.name} is exhausted")

    def allocate(self, req: IpamRequest) -> IpamResult:
        if self.fail_allocate is not None:
            raise self.fail_allocate
        key = (req.network, req.container_id, req.ifname)
        if key not in self.held:
            names = (*req.ipv4_pools, *req.ipv6_pools)
            missing = [n for n in names if n not in self.pools]
            if missing or not names:
                raise IpamError(IPAM_ERROR, f"no such pool {missing or names}")
            self.held[key] = [self._pick(self.pools[n]) for n in names]
        ips = self.held[key]
        routes = [r for a in ips for r in self.pools[a.pool].routes]
        return IpamResult(ips=list(ips), routes=routes)

    def release(self, network: str, container_id: str, ifname: str) -> None:
        if self.fail_release is not None:
            raise self.fail_release
        key = (network, container_id, ifname)
        self.released.append(key)
        ips = self.held.pop(key, None)
        if ips:
            self.freed.append((key, tuple(a.address for a in ips)))

    def check(self, network: str, container_id: str, ifname: str) -> IpamResult:
        ips = self.held.get((network, container_id, ifname))
        if not ips:
            raise IpamError(IPAM_ERROR, f"no addresses for {container_id}/{ifname}")
        return IpamResult(ips=list(ips))

    def gc(self, network: str, valid: Sequence[Attachment]) -> int:
        keep = {(a.container_id, a.ifname) for a in valid}
        stale = [k for k in self.held if k[0] == network and k[1:] not in keep]
        for key in stale:
            self.release(*key)
        return len(stale)

    def status(self) -> None:
        if not self.available:
            raise IpamError(STATUS_UNAVAILABLE, "ipamd is not reachable")

    def close(self) -> None:
        self.closed += 1

    def times_freed(self, address: str) -> int:
        """How many releases freed ``address`` (a CIDR as allocated)."""
        return sum(address in ips for _key, ips in self.freed)

    def addresses_of(self, container_id: str, ifname: str) -> list[str]:
        return [
            a.address
            for (_n, cid, ifn), ips in self.held.items()
            if (cid, ifn) == (container_id, ifname)
            for a in ips
        ]


_check: IpamClient = FakeIpam()
