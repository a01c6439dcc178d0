# SPDX-License-Identifier: Apache-2.0
"""SpiderIPPool v2beta1 and SpiderReservedIP: the model and Spiderpool's checks.

Standard library only (``ipaddress``); YAML lives in ``ipamd.manifest``.
Validation follows ``pkg/ippoolmanager/ippool_validate.go`` of Spiderpool and
keeps its reasons, so an operator reading our error recognises Spiderpool's.
Each check raises ``PoolError`` (mapped to INVALID_ARGUMENT) and nothing is
changed when one fails.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ipamd import ranges
from ipamd.ranges import Interval, IPAddress

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Kubernetes object names (RFC 1123 subdomain), what the CRD would enforce.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class PoolError(ValueError):
    """A pool or reserved-IP spec is invalid; the message is the reason."""


#: Entries in one address or name list (``ips``, ``excludeIPs``, ``nodeName``,
#: ...). A pool is written with ranges; a list longer than this is a generated
#: file gone wrong, and it would cost the daemon memory and the writer time.
MAX_LIST_ENTRIES = 10_000
MAX_ROUTES = 256

# A pod address is unicast: these blocks are refused in a pool's addresses.
_MULTICAST = {
    4: ipaddress.ip_network("224.0.0.0/4"),
    6: ipaddress.ip_network("ff00::/8"),
}


def brief(text: str, limit: int = 500) -> str:
    """``text`` cut to ``limit`` characters, for a reason sent or logged."""
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def shown(raw: Any, limit: int = 60) -> str:
    """``raw`` quoted for an error message, cut to ``limit`` characters: an
    error must never echo a megabyte of input back to the operator."""
    text = repr(raw)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


@dataclass(frozen=True, slots=True)
class Route:
    dst: IPNetwork
    gw: IPAddress | None = None


@dataclass(frozen=True, slots=True)
class Pool:
    """One SpiderIPPool spec, with its address sets as merged integer intervals."""

    name: str
    version: int
    subnet: IPNetwork
    ips: tuple[Interval, ...]
    exclude_ips: tuple[Interval, ...] = ()
    gateway: IPAddress | None = None
    routes: tuple[Route, ...] = ()
    default: bool = False
    disable: bool = False
    node_name: tuple[str, ...] = ()
    namespace_name: tuple[str, ...] = ()
    multus_name: tuple[str, ...] = ()
    # ips - excludeIPs, the addresses this pool may ever hand out.
    usable: tuple[Interval, ...] = field(default=(), compare=False)

    @property
    def prefixlen(self) -> int:
        return self.subnet.prefixlen

    def address(self, value: int) -> IPAddress:
        return (
            ipaddress.ip_address(value)
            if self.version == 4
            else (ipaddress.IPv6Address(value))
        )

    def ips_text(self) -> list[str]:
        return ranges.to_text(self.ips, self.version)

    def exclude_text(self) -> list[str]:
        return ranges.to_text(self.exclude_ips, self.version)

    def same_spec(self, other: Pool) -> bool:
        return self == other


@dataclass(frozen=True, slots=True)
class ReservedIP:
    """One SpiderReservedIP: addresses no pool of that family hands out."""

    name: str
    version: int
    ips: tuple[Interval, ...]

    def ips_text(self) -> list[str]:
        return ranges.to_text(self.ips, self.version)


def _version(raw: Any, where: str) -> int | None:
    """``ipVersion`` as Spiderpool types it: the integer 4 or 6, or absent
    (None: derived from the subnet or the addresses)."""
    if raw is None:
        return None
    if type(raw) is int and raw in (4, 6):
        return raw
    if raw in ("ipv4", "ipv6"):
        # Spiderpool's RoCE guide (per-node rail pools) writes `ipVersion: ipv4`;
        # the meaning is unambiguous, so its documents apply unchanged.
        return int(raw[-1])
    hint = ""
    if isinstance(raw, str) and raw.strip().lower().removeprefix("ipv") in ("4", "6"):
        # A quoted number or another spelling: say how to write it.
        hint = f" (write {raw.strip()[-1]} without quotes)"
    raise PoolError(
        f"{where}: invalid 'spec.ipVersion' {shown(raw)}: must be the integer 4 or "
        f"6, or absent to follow the addresses{hint}"
    )


def _strings(raw: Any, key: str, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise PoolError(f"{where}: 'spec.{key}' must be a list of strings")
    if len(raw) > MAX_LIST_ENTRIES:
        raise PoolError(
            f"{where}: 'spec.{key}' has {len(raw)} entries, at most "
            f"{MAX_LIST_ENTRIES} are accepted; write consecutive addresses as "
            "one range 'first-last'"
        )
    return tuple(raw)


def _bool(raw: Any, key: str, where: str) -> bool:
    if raw is None:
        return False
    if not isinstance(raw, bool):
        raise PoolError(
            f"{where}: 'spec.{key}' must be true or false, got {shown(raw)}"
        )
    return raw


def _check_name(name: Any, kind: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise PoolError(f"{kind}: invalid name {shown(name)} (lowercase RFC 1123 name)")
    return name


def _unicast(intervals: Sequence[Interval], version: int, key: str, where: str) -> None:
    block = _MULTICAST[version]
    common = ranges.intersect(
        intervals, [(int(block.network_address), int(block.broadcast_address))]
    )
    if common:
        bad = ranges.to_text(common, version)[0]
        raise PoolError(
            f"{where}: 'spec.{key}' {bad} is multicast ({block}); a pod address "
            "must be unicast"
        )


def _network(raw: str, strict: bool) -> IPNetwork:
    """A CIDR; a zone (``fe80::%eth0/64``) is refused, it names an interface."""
    if "%" in raw:
        raise ValueError("a zone (%...) names an interface, not an address")
    return ipaddress.ip_network(raw.strip(), strict=strict)


def _block_end(entry: str, subnet: IPNetwork) -> str:
    """``entry`` with a range end one past ``subnet`` read as the block's last host.

    Spiderpool's RoCE guide splits a /16 into /27 rail pools and ends each
    range on the next block's first address (``172.16.1.2-172.16.1.32`` in
    172.16.1.0/27), the last one on ``172.16.1.256``. The intent - up to the
    end of the block - is plain, and the broadcast address is never a pod's,
    so such an end means the address before the broadcast. Any other end
    outside the subnet is still refused.
    """
    first, sep, last = entry.partition("-")
    if not sep or subnet.version != 4 or subnet.prefixlen > 30:
        return entry
    past = int(subnet.broadcast_address) + 1
    octets = last.strip().split(".")
    one_past = last.strip() == str(ipaddress.IPv4Address(past % 2**32)) or (
        len(octets) == 4
        and octets[3] == "256"
        and str(subnet.broadcast_address).endswith(".255")
        and ".".join(octets[:3]) == str(subnet.broadcast_address).rpartition(".")[0]
    )
    if not one_past:
        return entry
    return f"{first}-{subnet.broadcast_address - 1}"


def _intervals(
    entries: Sequence[str], version: int, key: str, where: str
) -> list[Interval]:
    out = []
    for entry in entries:
        try:
            out.append(ranges.parse_entry(entry, version))
        except ValueError as exc:
            raise PoolError(
                f"{where}: invalid 'spec.{key}' entry {shown(entry)}: "
                f"{shown(str(exc), 120)[1:-1]}"
            ) from None
    return ranges.merge(out)


# SpiderIPPool fields we evaluate; selectors need the Kubernetes API we do not
# have, so they are refused rather than silently ignored (a pool meant for one
# node would otherwise serve every node).
_POOL_KEYS = {
    "ipVersion",
    "subnet",
    "ips",
    "excludeIPs",
    "gateway",
    "routes",
    "default",
    "disable",
    "nodeName",
    "namespaceName",
    "multusName",
    "vlan",
}
_SELECTOR_KEYS = {"podAffinity", "nodeAffinity", "namespaceAffinity"}


#: The well-known node label whose value is the node's name.
HOSTNAME_LABEL = "kubernetes.io/hostname"


def _hostnames(selector: Any) -> tuple[str, ...] | None:
    """The node names a ``nodeAffinity`` selector that only names nodes by
    ``kubernetes.io/hostname`` stands for (``matchLabels`` with that one key,
    or ``matchExpressions`` of that key with operator ``In``), as per-node
    pools pin themselves; None for any other selector, which would need the
    node's labels (ipamd has no Kubernetes API)."""
    if not isinstance(selector, Mapping) or not selector:
        return None
    if set(selector) - {"matchLabels", "matchExpressions"}:
        return None
    names: list[str] = []
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or set(labels) - {HOSTNAME_LABEL}:
        return None
    if labels:
        names.append(str(labels[HOSTNAME_LABEL]))
    exprs = selector.get("matchExpressions") or []
    if not isinstance(exprs, list):
        return None
    for expr in exprs:
        if (
            not isinstance(expr, Mapping)
            or expr.get("key") != HOSTNAME_LABEL
            or expr.get("operator") != "In"
            or not isinstance(expr.get("values"), list)
            or not all(isinstance(v, str) for v in expr["values"])
        ):
            return None
        names += expr["values"]
    if labels and exprs:
        return None  # both at once: not the shape per-node pools take
    return tuple(names) if names else None


def pool_from_spec(name: str, spec: Mapping[str, Any]) -> Pool:
    """Build and self-validate a pool from a SpiderIPPool ``spec`` mapping."""
    where = f"SpiderIPPool {name}"
    _check_name(name, "SpiderIPPool")
    if not isinstance(spec, Mapping):
        raise PoolError(f"{where}: 'spec' must be a mapping")
    for key in spec:
        if not isinstance(key, str):
            raise PoolError(f"{where}: unknown field 'spec.{shown(key)[1:-1]}'")
        if key == "nodeAffinity" and _hostnames(spec[key]) is not None:
            continue
        if key in _SELECTOR_KEYS:
            raise PoolError(
                f"{where}: 'spec.{key}' (a label selector) is not supported by "
                "ipamd, which has no Kubernetes API; use nodeName/namespaceName"
            )
        if key not in _POOL_KEYS:
            raise PoolError(f"{where}: unknown field 'spec.{shown(key)[1:-1]}'")
    subnet_raw = spec.get("subnet")
    if not isinstance(subnet_raw, str) or not subnet_raw:
        raise PoolError(f"{where}: 'spec.subnet' is required")
    try:
        subnet = _network(subnet_raw, strict=False)
    except ValueError as exc:
        raise PoolError(
            f"{where}: invalid 'spec.subnet' {shown(subnet_raw)}: {exc}"
        ) from None
    if subnet.is_multicast:
        raise PoolError(
            f"{where}: 'spec.subnet' {subnet} is a multicast block; a pod address "
            "must be unicast"
        )
    version = _version(spec.get("ipVersion"), where) or subnet.version
    if version != subnet.version:
        raise PoolError(
            f"{where}: 'spec.subnet' {subnet_raw} is not an IPv{version} subnet"
        )
    ips = _intervals(
        [_block_end(e, subnet) for e in _strings(spec.get("ips"), "ips", where)],
        version,
        "ips",
        where,
    )
    if not ips:
        raise PoolError(f"{where}: 'spec.ips' is required")
    _unicast(ips, version, "ips", where)
    net = [(int(subnet.network_address), int(subnet.broadcast_address))]
    outside = ranges.subtract(ips, net)
    if outside:
        bad = ranges.to_text(outside, version)[0]
        raise PoolError(f"{where}: '{bad}' not pertains to the 'spec.subnet' {subnet}")
    exclude = _intervals(
        _strings(spec.get("excludeIPs"), "excludeIPs", where),
        version,
        "excludeIPs",
        where,
    )
    outside = ranges.subtract(exclude, net)
    if outside:
        bad = ranges.to_text(outside, version)[0]
        raise PoolError(
            f"{where}: 'spec.excludeIPs' '{bad}' not pertains to the 'spec.subnet' "
            f"{subnet}"
        )
    usable = ranges.subtract(ips, exclude)
    gateway = None
    gw_raw = spec.get("gateway")
    if gw_raw:
        try:
            gateway = ranges.parse_ip(str(gw_raw), version)
        except ValueError as exc:
            raise PoolError(
                f"{where}: invalid 'spec.gateway' {shown(gw_raw)}: {exc}"
            ) from None
        if gateway.is_multicast:
            raise PoolError(
                f"{where}: 'spec.gateway' {gateway} is multicast; a gateway is a "
                "unicast address"
            )
        if gateway not in subnet:
            raise PoolError(
                f"{where}: 'spec.gateway' {gateway} not pertains to the "
                f"'spec.subnet' {subnet}"
            )
        if ranges.contains(usable, int(gateway)):
            raise PoolError(
                f"{where}: 'spec.ips' conflicts with 'spec.gateway' {gateway}, "
                "add the gateway IP address to 'spec.excludeIPs'"
            )
    routes = _routes(spec.get("routes"), version, subnet, where)
    return Pool(
        name=name,
        version=version,
        subnet=subnet,
        ips=tuple(ips),
        exclude_ips=tuple(exclude),
        gateway=gateway,
        routes=routes,
        default=_bool(spec.get("default"), "default", where),
        disable=_bool(spec.get("disable"), "disable", where),
        node_name=_strings(spec.get("nodeName"), "nodeName", where)
        + (_hostnames(spec.get("nodeAffinity")) or ()),
        namespace_name=_strings(spec.get("namespaceName"), "namespaceName", where),
        multus_name=_strings(spec.get("multusName"), "multusName", where),
        usable=tuple(usable),
    )


def _routes(raw: Any, version: int, subnet: IPNetwork, where: str) -> tuple[Route, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PoolError(f"{where}: 'spec.routes' must be a list")
    if len(raw) > MAX_ROUTES:
        raise PoolError(
            f"{where}: 'spec.routes' has {len(raw)} routes, at most {MAX_ROUTES}"
        )
    out: list[Route] = []
    seen: set[IPNetwork] = set()
    for item in raw:
        if not isinstance(item, Mapping):
            raise PoolError(f"{where}: each of 'spec.routes' must be a mapping")
        # Older Spiderpool docs write routes as {to, via}.
        dst_raw = item.get("dst", item.get("to"))
        gw_raw = item.get("gw", item.get("via"))
        try:
            dst = _network(str(dst_raw), strict=True)
        except ValueError as exc:
            raise PoolError(
                f"{where}: invalid route dst {shown(dst_raw)}: {exc}"
            ) from None
        if dst.version != version:
            raise PoolError(f"{where}: route dst {dst} is not IPv{version}")
        if dst.prefixlen == 0:
            raise PoolError(
                f"{where}: the default route {dst} is not allowed in 'spec.routes', "
                "use 'spec.gateway' instead"
            )
        if dst in seen:
            raise PoolError(f"{where}: duplicate route dst {dst} in 'spec.routes'")
        seen.add(dst)
        gw = None
        if gw_raw:
            try:
                gw = ranges.parse_ip(str(gw_raw), version)
            except ValueError as exc:
                raise PoolError(
                    f"{where}: invalid route gw {shown(gw_raw)}: {exc}"
                ) from None
            if gw not in subnet:
                raise PoolError(
                    f"{where}: route gw {gw} not pertains to the 'spec.subnet' {subnet}"
                )
        out.append(Route(dst, gw))
    return tuple(out)


def reserved_from_spec(name: str, spec: Mapping[str, Any]) -> ReservedIP:
    """Build a SpiderReservedIP; ``ipVersion`` is derived from the IPs if absent."""
    where = f"SpiderReservedIP {name}"
    _check_name(name, "SpiderReservedIP")
    if not isinstance(spec, Mapping):
        raise PoolError(f"{where}: 'spec' must be a mapping")
    for key in spec:
        if key not in ("ipVersion", "ips"):
            raise PoolError(f"{where}: unknown field 'spec.{shown(key)[1:-1]}'")
    entries = _strings(spec.get("ips"), "ips", where)
    if not entries:
        raise PoolError(f"{where}: 'spec.ips' is required")
    version = _version(spec.get("ipVersion"), where)
    if version is None:
        try:
            version = ranges.parse_ip(entries[0].partition("-")[0]).version
        except ValueError as exc:
            raise PoolError(
                f"{where}: invalid 'spec.ips' entry {shown(entries[0])}: {exc}"
            ) from None
    ips = _intervals(entries, version, "ips", where)
    return ReservedIP(name=name, version=version, ips=tuple(ips))


def pool_to_spec(pool: Pool) -> dict[str, Any]:
    """The SpiderIPPool ``spec`` as Spiderpool writes it (omitting empty fields)."""
    spec: dict[str, Any] = {
        "ipVersion": pool.version,
        "subnet": str(pool.subnet),
        "ips": pool.ips_text(),
    }
    if pool.exclude_ips:
        spec["excludeIPs"] = pool.exclude_text()
    if pool.gateway is not None:
        spec["gateway"] = str(pool.gateway)
    if pool.routes:
        spec["routes"] = [
            {"dst": str(r.dst), "gw": str(r.gw) if r.gw else ""} for r in pool.routes
        ]
    for key, val in (
        ("default", pool.default),
        ("disable", pool.disable),
    ):
        if val:
            spec[key] = val
    for key, items in (
        ("nodeName", pool.node_name),
        ("namespaceName", pool.namespace_name),
        ("multusName", pool.multus_name),
    ):
        if items:
            spec[key] = list(items)
    return spec


def reserved_to_spec(res: ReservedIP) -> dict[str, Any]:
    return {"ipVersion": res.version, "ips": res.ips_text()}


def check_pool_set(pools: Iterable[Pool]) -> None:
    """Cross-pool checks: subnets of one family either equal or disjoint, and
    pools sharing a subnet never share an address."""
    items = sorted(pools, key=lambda p: p.name)
    for i, a in enumerate(items):
        for b in items[i + 1 :]:
            if a.version != b.version:
                continue
            if a.subnet != b.subnet:
                if a.subnet.overlaps(b.subnet):
                    raise PoolError(
                        f"SpiderIPPool {b.name}: 'spec.subnet' {b.subnet} overlaps "
                        f"with IPPool {a.name} which 'spec.subnet' is {a.subnet}"
                    )
                continue
            common = ranges.intersect(a.usable, b.usable)
            if common:
                bad = ranges.to_text(common, a.version)[0]
                raise PoolError(
                    f"SpiderIPPool {b.name}: 'spec.ips' {bad} overlaps with "
                    f"IPPool {a.name}"
                )


def check_update(old: Pool, new: Pool) -> None:
    """Spiderpool's immutable fields."""
    if old.subnet != new.subnet:
        raise PoolError(
            f"SpiderIPPool {new.name}: 'spec.subnet' is immutable "
            f"({old.subnet} -> {new.subnet})"
        )
    if old.version != new.version:
        raise PoolError(f"SpiderIPPool {new.name}: 'spec.ipVersion' is immutable")
