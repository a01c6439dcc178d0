# SPDX-License-Identifier: Apache-2.0
"""Addresses and per-NIC policy routing in the pod; deterministic table numbers.

Written against ``cni.kernel.Links``; imports nothing third-party.

Layout for a NIC ``net3`` with 172.16.13.5/24, gateway .254 (all in the pod):

    ip rule  from 172.16.13.5/32 lookup 103 pref 900
    table 103: 172.16.13.0/24 dev net3 scope link src 172.16.13.5
               <pool routes> via <gw> dev net3
               default via 172.16.13.254 dev net3
    main:      172.16.13.0/24 dev net3 (the kernel's prefix route, kept)

Decisions (README "Policy routing"):
- Table numbers depend on the NIC name only, so attach order never matters
  (Spiderpool counts UP links, which is order-dependent):
  ``net<N>`` -> 100 + N (coordinator's numbering for net1..), any other name
  -> a stable hash into [10000, 60000). An explicit ``routeTable`` wins. If a
  rule in the pod already uses the number for another source, we probe
  upwards (collision-free within the pod).
- The kernel's on-link prefix route stays in main: unbound sockets to a peer
  on the same rail then leave through that rail with its address, and the
  eight rails' subnets never overlap. What would really pollute main - the
  rail's default route and pool routes - go only into the NIC's table, and the
  source rule (explicit priority, before main's 32766) sends everything from
  the NIC's address there. So a NIC never reaches across to another rail's
  table: traffic from its address only ever sees its own table.
- The pod's main default route stays on eth0 unless ``podDefaultRouteNIC``
  names this NIC; then our default replaces main's, and DEL puts the saved
  one back. The NIC that loses it (eth0) gets what Spiderpool's coordinator
  gives it: its old default route in a table of its own (``preferred_table``
  of its name) and a source rule for each of its addresses, so replies from
  eth0's address still leave through eth0. DEL removes both. The route keeps
  every attribute (onlink above all: Calico's ``default via 169.254.1.1 dev
  eth0 onlink`` is refused without it), and main's routes through the same
  gateway come along; DEL restores main exactly.
- The cluster's CIDRs (``hijackCIDR``) go via eth0's gateway into every
  rail's table, and into main when a rail takes the default route.
- Several rails on one L2 segment: ``RAIL_SYSCTLS`` on each NIC.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from cni.errors import INVALID_CONFIG, CniError
from cni.ipam import IpamAddress, IpamRoute
from cni.kernel import KernelError, LinkExists, Links, RouteSpec, RuleSpec
from cni.kernel.cni_errors import cni_error, kernel_step
from cni.rollback import Rollback

log = logging.getLogger(__name__)

AF_INET, AF_INET6 = 2, 10
MAIN_TABLE = 254
RT_SCOPE_LINK = 253
NET_TABLE_BASE = 100
HASH_TABLE_BASE = 10000
HASH_TABLE_SPAN = 50000
_NET_RE = re.compile(r"^net(\d{1,4})$")
_RESERVED = frozenset({0, 253, 254, 255})


def preferred_table(ifname: str) -> int:
    """The table a NIC gets when nothing collides: depends on the name only."""
    m = _NET_RE.match(ifname)
    if m and 0 < int(m.group(1)) < HASH_TABLE_BASE - NET_TABLE_BASE:
        return NET_TABLE_BASE + int(m.group(1))
    return HASH_TABLE_BASE + zlib.crc32(ifname.encode()) % HASH_TABLE_SPAN


def choose_table(
    ifname: str,
    used: Sequence[RuleSpec],
    own_sources: Sequence[str],
    explicit: int | None = None,
) -> int:
    """The NIC's table: ``explicit``, else ``preferred_table`` probed past collisions.

    A table counts as taken when a rule in the pod looks it up for a source
    that is not one of ours (a retried ADD finds its own rules again).
    """
    if explicit is not None:
        return explicit
    taken = {r.table for r in used if r.src not in own_sources}
    table = preferred_table(ifname)
    while table in taken or table in _RESERVED:
        table += 1
    return table


def family_of(cidr: str) -> int:
    return AF_INET6 if ipaddress.ip_interface(cidr).version == 6 else AF_INET


def host_prefix(cidr: str) -> str:
    ip = ipaddress.ip_interface(cidr).ip
    return f"{ip}/{ip.max_prefixlen}"


def default_dst(family: int) -> str:
    return "::/0" if family == AF_INET6 else "0.0.0.0/0"


@dataclass(frozen=True, slots=True)
class RoutingPlan:
    """What policy routing installs for one NIC."""

    table: int
    rules: tuple[RuleSpec, ...]
    routes: tuple[RouteSpec, ...]  # in ``table`` (and the old default NIC's)
    main_defaults: tuple[RouteSpec, ...]  # main-table defaults (podDefaultRouteNIC)


def plan_routing(
    ifname: str,
    ips: Sequence[IpamAddress],
    pool_routes: Sequence[IpamRoute],
    table: int,
    priority: int,
    default_route_here: bool,
) -> RoutingPlan:
    """Rules and routes for ``ifname`` (pure; see the module doc for the layout)."""
    rules: list[RuleSpec] = []
    routes: list[RouteSpec] = []
    mains: list[RouteSpec] = []
    for ip in ips:
        iface = ipaddress.ip_interface(ip.address)
        fam = AF_INET6 if iface.version == 6 else AF_INET
        rules.append(
            RuleSpec(
                src=host_prefix(ip.address), table=table, priority=priority, family=fam
            )
        )
        routes.append(
            RouteSpec(
                dst=str(iface.network),
                dev=ifname,
                table=table,
                scope=RT_SCOPE_LINK,
                src=str(iface.ip),
            )
        )
        for r in pool_routes:
            if ipaddress.ip_network(r.dst).version != iface.version:
                continue
            gw = r.gw or ip.gateway
            routes.append(RouteSpec(dst=r.dst, gw=gw, dev=ifname, table=table))
        if ip.gateway:
            routes.append(
                RouteSpec(dst=default_dst(fam), gw=ip.gateway, dev=ifname, table=table)
            )
            if default_route_here:
                mains.append(
                    RouteSpec(
                        dst=default_dst(fam),
                        gw=ip.gateway,
                        dev=ifname,
                        table=MAIN_TABLE,
                    )
                )
    return RoutingPlan(table, tuple(rules), tuple(_unique(routes)), tuple(mains))


def keep_old_default_nic(
    links: Links,
    netns: str,
    plan: RoutingPlan,
    priority: int,
    used: Sequence[RuleSpec],
) -> RoutingPlan:
    """``plan`` plus a table and source rules for the NIC whose main default
    route ``plan`` replaces (see the module doc); ``plan`` itself if none."""
    rules = list(plan.rules)
    routes = list(plan.routes)
    tables: dict[str, int] = {}
    for new in plan.main_defaults:
        fam = AF_INET6 if ":" in new.dst else AF_INET
        for old in links.routes(MAIN_TABLE, fam, netns):
            if old.dst != new.dst or not old.dev or old.dev == new.dev:
                continue
            own = [host_prefix(a) for a in links.addresses(old.dev, netns)]
            if old.dev not in tables:
                table = choose_table(old.dev, used, own)
                while table == plan.table or table in tables.values():
                    table += 1
                tables[old.dev] = table
            table = tables[old.dev]
            # The default and every route through the same gateway, each with
            # all its attributes (onlink, metric, MTU, advmss, scope, protocol):
            # ``default via 169.254.1.1 dev eth0 onlink`` loses its meaning -
            # and the kernel refuses it - without the flag.
            routes += [
                replace(r, table=table)
                for r in links.routes(MAIN_TABLE, fam, netns)
                if r.dev == old.dev
                and (r == old or (old.gw is not None and r.gw == old.gw))
            ]
            for cidr in links.addresses(old.dev, netns):
                if family_of(cidr) == fam:
                    rules.append(RuleSpec(host_prefix(cidr), table, priority, fam))
    if not tables:
        return plan
    return replace(plan, rules=tuple(rules), routes=tuple(routes))


#: The pod's cluster NIC: CNI names the primary interface eth0, and multus
#: gives its default network that name.
CLUSTER_NIC = "eth0"


def require_default_route_nic(
    links: Links, netns: str, ifname: str, wanted: str
) -> None:
    """Refuse (code 7) a ``podDefaultRouteNIC`` that is neither this NIC nor in
    the pod yet, before the first change.

    Spiderpool's coordinator refuses the same at each NIC's ADD (the named NIC
    must exist in the pod). Multus attaches the pod's networks in order, so
    the NIC taking the default route must come before the others; a name that
    no NIC of the pod has - a typo, a ninth rail of eight - would otherwise
    leave eth0's default in place without a word.
    """
    if not wanted or wanted == ifname or links.find(wanted, netns) is not None:
        return
    have = sorted(ln.name for ln in links.list(netns) if ln.name != "lo")
    raise CniError(
        INVALID_CONFIG,
        f"podDefaultRouteNIC {wanted} is not in the pod",
        f"{ifname} is being attached and the pod has {', '.join(have) or 'no NIC'}; "
        f"the NIC named by podDefaultRouteNIC must be this one or one attached "
        f"before it (multus attaches the pod's networks in order)",
    )


def with_cluster_routes(
    links: Links,
    netns: str,
    plan: RoutingPlan,
    cidrs: Sequence[str],
    default_route_here: bool,
) -> RoutingPlan:
    """``plan`` plus the cluster's CIDRs (coordinator ``hijackCIDR``: service
    and pod CIDRs) via eth0's gateway in the NIC's table, and in main when this
    NIC takes the default route.

    Traffic from a rail's address looks up the rail's table only, whose default
    goes out the rail: without these, a service IP is sent to the RDMA fabric.
    The gateway route is eth0's default as it is (onlink and all), found in
    main or in the table its addresses' rules look up (after another NIC took
    main's default). No eth0 default: nothing is added, and a log line says so.
    """
    if not cidrs:
        return plan
    extra: list[RouteSpec] = []
    for fam in sorted({family_of(c) for c in cidrs}):
        via = _cluster_gateway(links, netns, fam)
        if via is None:
            log.warning(
                "no default route via %s in %s: cluster CIDRs %s not routed",
                CLUSTER_NIC,
                netns,
                ", ".join(c for c in cidrs if family_of(c) == fam),
            )
            continue
        tables = [plan.table, *([MAIN_TABLE] if default_route_here else [])]
        for cidr in cidrs:
            if family_of(cidr) != fam:
                continue
            dst = str(ipaddress.ip_network(cidr, strict=False))
            extra += [
                replace(via, dst=dst, table=t, metric=None, src=None) for t in tables
            ]
    return replace(plan, routes=tuple(_unique([*plan.routes, *extra])))


def _cluster_gateway(links: Links, netns: str, fam: int) -> RouteSpec | None:
    """eth0's default route of family ``fam``, wherever it is now."""
    tables = [MAIN_TABLE]
    own = {host_prefix(a) for a in _addresses_or_none(links, netns)}
    tables += [r.table for r in links.rules(fam, netns) if r.src in own]
    for table in dict.fromkeys(tables):
        for route in links.routes(table, fam, netns):
            if route.dst == default_dst(fam) and route.dev == CLUSTER_NIC:
                return route
    return None


def _addresses_or_none(links: Links, netns: str) -> list[str]:
    if links.find(CLUSTER_NIC, netns) is None:
        return []
    return links.addresses(CLUSTER_NIC, netns)


def _unique(routes: list[RouteSpec]) -> list[RouteSpec]:
    seen: set[tuple[str, int]] = set()
    out = []
    for r in routes:
        if (r.dst, r.table) not in seen:
            seen.add((r.dst, r.table))
            out.append(r)
    return out


#: Per-NIC IPv4 settings that keep a rail's traffic on the NIC whose address
#: it carries when several NICs of the pod share one L2 segment (VFs of one PF,
#: a flat RoCE fabric): answer ARP only for the NIC's own addresses
#: (arp_ignore=1) and announce from the address of the NIC a packet leaves by
#: (arp_announce=2), so a peer never learns net1's MAC for net2's address and
#: sends net2's RoCE traffic to net1's HCA ("ARP flux"). rp_filter=2 (loose):
#: with per-NIC source rules a reply may legitimately arrive on one NIC for a
#: flow whose route back is another's table; strict mode would drop it. The
#: kernel uses the larger of ``all`` and the NIC's value for all three, so the
#: NIC's setting holds whatever the pod's ``all`` says (unless stricter). A VF
#: taken back to the host gets the host's defaults again (the settings are per
#: netns), so DEL has nothing to undo.
RAIL_SYSCTLS = (("arp_ignore", "1"), ("arp_announce", "2"), ("rp_filter", "2"))


def tune_rail_sysctls(links: Links, ifname: str, netns: str) -> None:
    """``RAIL_SYSCTLS`` on the pod NIC, before it has an address.

    A refusal is logged, not fatal (as sriov-cni's own pod sysctls): the NIC
    works, and conflict detection ignores the pod's own NICs either way; only
    a peer may then learn another rail's MAC for this NIC's address.
    """
    for key, value in RAIL_SYSCTLS:
        try:
            links.set_sysctl(f"net/ipv4/conf/{ifname}/{key}", value, netns)
        except (KernelError, OSError) as exc:
            log.warning(
                "%s=%s on %s in %s failed (%s): peers on a shared segment may "
                "send this NIC's traffic to another NIC of the pod",
                key,
                value,
                ifname,
                netns,
                exc,
            )


def add_addresses(
    links: Links, ifname: str, netns: str, addresses: Sequence[str], rb: Rollback
) -> None:
    """Configure each CIDR on the pod NIC; undo on ``rb``.

    IPv6 addresses skip the kernel's DAD (``nodad``): our own NDP conflict
    check runs next, and a tentative address could not be a route source.
    """
    for cidr in addresses:
        try:
            if family_of(cidr) == AF_INET6:
                links.add_address(ifname, cidr, netns, nodad=True)
            else:
                links.add_address(ifname, cidr, netns)
        except LinkExists:
            continue  # a retried ADD finds its own address; not ours to undo
        except KernelError as exc:
            raise cni_error(
                exc, f"failed to add IP address {cidr} to {ifname}"
            ) from exc
        rb.push(
            partial(links.del_address, ifname, cidr, netns),
            f"remove address {cidr} from {ifname}",
        )


def apply_routing(
    links: Links, netns: str, plan: RoutingPlan, rb: Rollback
) -> list[RouteSpec]:
    """Install the plan's routes then rules; returns the main defaults replaced."""
    for route in plan.routes:
        _add_route(links, route, netns, rb)
    saved: list[RouteSpec] = []
    for route in plan.main_defaults:
        fam = AF_INET6 if ":" in route.dst else AF_INET
        with kernel_step(
            f"failed to take over the main-table route {route.dst} for {route.dev}"
        ):
            for old in links.routes(MAIN_TABLE, fam, netns):
                if old.dst == route.dst:
                    links.del_route(old, netns)
                    rb.push(partial(links.add_route, old, netns), f"restore {old.dst}")
                    saved.append(old)
        _add_route(links, route, netns, rb)
    for rule in plan.rules:
        try:
            links.add_rule(rule, netns)
        except LinkExists:
            continue  # a retried ADD finds its own rule
        except KernelError as exc:
            raise cni_error(
                exc,
                f"failed to add rule from {rule.src} lookup {rule.table} in {netns}",
            ) from exc
        rb.push(
            partial(links.del_rule, rule, netns),
            f"remove rule from {rule.src} lookup {rule.table}",
        )
    return saved


def _add_route(links: Links, route: RouteSpec, netns: str, rb: Rollback) -> None:
    try:
        links.add_route(route, netns)
    except LinkExists:
        return
    except KernelError as exc:
        via = f" via {route.gw}" if route.gw else ""
        dev = f" dev {route.dev}" if route.dev else ""
        raise cni_error(
            exc, f"failed to add route {route.dst}{via}{dev} table {route.table}"
        ) from exc
    rb.push(
        lambda: links.del_route(route, netns),
        f"remove route {route.dst} table {route.table}",
    )


def remove_routing(
    links: Links,
    netns: str,
    rules: Sequence[RuleSpec],
    routes: Sequence[RouteSpec],
    saved_main: Sequence[RouteSpec],
) -> list[str]:
    """DEL: rules first, then routes, then restore main defaults; failures listed.

    Already-missing entries are fine (the kernel drops routes of a link that
    left the netns); only other kernel errors are reported.
    """
    failures: list[str] = []

    def attempt(what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except (LookupError, KernelError) as exc:
            if _is_gone(exc):
                return
            log.error("%s failed: %s", what, exc)
            failures.append(f"{what}: {exc}")

    for rule in rules:
        attempt(f"remove rule from {rule.src}", partial(links.del_rule, rule, netns))
    for route in routes:
        attempt(f"remove route {route.dst}", partial(links.del_route, route, netns))
    for route in saved_main:
        attempt(
            f"restore main route {route.dst}", partial(_restore, links, route, netns)
        )
    return failures


def _restore(links: Links, route: RouteSpec, netns: str) -> None:
    try:
        links.add_route(route, netns)
    except LinkExists:
        pass


def _is_gone(exc: BaseException) -> bool:
    # ESRCH (no such rule/route) and ENODEV/ENOENT all mean "already gone".
    return getattr(exc, "errno", None) in (2, 3, 19) or isinstance(exc, LookupError)
