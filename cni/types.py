# SPDX-License-Identifier: Apache-2.0
"""The CNI data model: the NetConf base fields and the Result with its versions.

Pure standard library (plus ``cni.{errors,version,netconf_fields}``), so
VERSION and config errors stay cheap. ``ipaddress`` types inside, strings only
at the JSON boundary (``from_json`` / ``to_json``).

Result versions (SPEC.md "Result", Go ``pkg/types/{020,040,100}``):

- ``Result.from_json(obj, default_version)`` reads any version 0.1.0 .. 1.1.0,
  e.g. a prevResult or a delegated IPAM plugin's output. The object's own
  ``cniVersion`` decides how it is read; ``default_version`` (the netconf's)
  is used when it has none, as Go's ``ParsePrevResult`` injects it. (The
  runtime converts prevResult to the config's version, so the two agree in
  practice.) 0.1.0/0.2.0 ``ip4``/``ip6`` objects are upgraded (their routes
  become top-level routes).
- ``Result.to_json(version)`` writes 0.3.0, 0.3.1, 0.4.0, 1.0.0 or 1.1.0:
  0.3.x/0.4.0 carry ``"version": "4"|"6"`` on each ip; the 1.1.0 additions
  (route ``mtu``, ``advmss``, ``priority``, ``table``, ``scope``; interface
  ``mtu``, ``socketPath``, ``pciID``) are written only for 1.1.0, as the
  spec's schemas say. (The Go library shares one type for 1.0.0 and 1.1.0 and
  so prints them at 1.0.0 too; a strict 1.0.0 consumer would reject that.)
  ``dns`` is always written (``{}`` when empty) and empty lists are omitted,
  matching Go's JSON encoding (omitempty rules and key order).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cni import netconf_fields as fields
from cni.errors import DECODE_FAILURE, INCOMPATIBLE_VERSION, CniError
from cni.version import ALL, READABLE, parse

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_V040 = parse("0.4.0")
_V110 = parse("1.1.0")


def _bad(what: str, details: str) -> CniError:
    return CniError(DECODE_FAILURE, f"failed to decode {what}", details)


def _str(obj: Mapping[str, Any], key: str, what: str, default: str = "") -> str:
    val = obj.get(key, default)
    if val is None:
        return default
    if not isinstance(val, str):
        raise _bad(what, f"{key!r} must be a string, got {val!r}")
    return val


def _int_or_none(obj: Mapping[str, Any], key: str, what: str) -> int | None:
    val = obj.get(key)
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, int):
        raise _bad(what, f"{key!r} must be an integer, got {val!r}")
    return val


def _str_list(obj: Mapping[str, Any], key: str, what: str) -> list[str]:
    val = obj.get(key)
    if val is None:
        return []
    if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
        raise _bad(what, f"{key!r} must be a list of strings, got {val!r}")
    return list(val)


def parse_cidr(text: str, what: str = "address") -> IPInterface:
    """A CIDR with host bits kept (Go ``types.ParseCIDR``); CniError(6) if bad."""
    if "/" not in text:
        raise _bad(what, f"invalid CIDR address: {text}")
    try:
        return ipaddress.ip_interface(text)
    except ValueError as e:
        raise _bad(what, f"invalid CIDR address: {text}: {e}") from None


def parse_ip(text: str, what: str = "address") -> IPAddress:
    """An IPv4/IPv6 address; CniError(6) if bad."""
    try:
        return ipaddress.ip_address(text)
    except ValueError as e:
        raise _bad(what, f"invalid IP address: {text}: {e}") from None


def parse_network(text: str, what: str = "route") -> IPNetwork:
    """A route destination; host bits are cleared (``10.1.2.3/8`` -> ``10.0.0.0/8``)."""
    return parse_cidr(text, what).network


# --------------------------------------------------------------------------
# Result records


@dataclass(slots=True)
class Interface:
    """One interface of a result (SPEC.md "interfaces")."""

    name: str
    mac: str = ""
    mtu: int = 0  # 0 = unknown/omitted
    sandbox: str = ""  # netns path; "" for host-side interfaces
    socket_path: str = ""  # 1.1.0
    pci_id: str = ""  # 1.1.0

    @classmethod
    def from_json(cls, obj: Any) -> Interface:
        if not isinstance(obj, Mapping):
            raise _bad("interface", f"expected an object, got {obj!r}")
        return cls(
            name=_str(obj, "name", "interface"),
            mac=_str(obj, "mac", "interface"),
            mtu=_int_or_none(obj, "mtu", "interface") or 0,
            sandbox=_str(obj, "sandbox", "interface"),
            socket_path=_str(obj, "socketPath", "interface"),
            pci_id=_str(obj, "pciID", "interface"),
        )

    def to_json(self, version: str) -> dict[str, Any]:
        v = parse(version)
        out: dict[str, Any] = {"name": self.name}
        if self.mac:
            out["mac"] = self.mac
        if self.mtu and v >= _V110:
            out["mtu"] = self.mtu
        if self.sandbox:
            out["sandbox"] = self.sandbox
        if v >= _V110:
            if self.socket_path:
                out["socketPath"] = self.socket_path
            if self.pci_id:
                out["pciID"] = self.pci_id
        return out


@dataclass(slots=True)
class IPConfig:
    """One address of a result; ``interface`` indexes ``Result.interfaces``."""

    address: IPInterface
    gateway: IPAddress | None = None
    interface: int | None = None

    @property
    def version(self) -> int:
        """4 or 6 (written as a string in 0.3.x/0.4.0 results)."""
        return self.address.version

    @classmethod
    def from_json(cls, obj: Any) -> IPConfig:
        if not isinstance(obj, Mapping):
            raise _bad("ip", f"expected an object, got {obj!r}")
        if "address" not in obj:
            raise _bad("ip", f"missing 'address' in {dict(obj)!r}")
        gw = _str(obj, "gateway", "ip")
        return cls(
            address=parse_cidr(_str(obj, "address", "ip"), "ip"),
            gateway=parse_ip(gw, "ip gateway") if gw else None,
            interface=_int_or_none(obj, "interface", "ip"),
        )

    def to_json(self, version: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if parse(version) <= _V040:
            out["version"] = str(self.address.version)
        if self.interface is not None:
            out["interface"] = self.interface
        out["address"] = str(self.address)
        if self.gateway is not None:
            out["gateway"] = str(self.gateway)
        return out


@dataclass(slots=True)
class Route:
    """One route of a result; the extras are 1.1.0 fields (0/None = unset)."""

    dst: IPNetwork
    gw: IPAddress | None = None
    mtu: int = 0
    advmss: int = 0
    priority: int = 0
    table: int | None = None
    scope: int | None = None

    @classmethod
    def from_json(cls, obj: Any) -> Route:
        if not isinstance(obj, Mapping):
            raise _bad("route", f"expected an object, got {obj!r}")
        if "dst" not in obj:
            raise _bad("route", f"missing 'dst' in {dict(obj)!r}")
        gw = _str(obj, "gw", "route")
        return cls(
            dst=parse_network(_str(obj, "dst", "route")),
            gw=parse_ip(gw, "route gw") if gw else None,
            mtu=_int_or_none(obj, "mtu", "route") or 0,
            advmss=_int_or_none(obj, "advmss", "route") or 0,
            priority=_int_or_none(obj, "priority", "route") or 0,
            table=_int_or_none(obj, "table", "route"),
            scope=_int_or_none(obj, "scope", "route"),
        )

    def to_json(self, version: str) -> dict[str, Any]:
        out: dict[str, Any] = {"dst": str(self.dst)}
        if self.gw is not None:
            out["gw"] = str(self.gw)
        if parse(version) >= _V110:
            if self.mtu:
                out["mtu"] = self.mtu
            if self.advmss:
                out["advmss"] = self.advmss
            if self.priority:
                out["priority"] = self.priority
            if self.table is not None:
                out["table"] = self.table
            if self.scope is not None:
                out["scope"] = self.scope
        return out


@dataclass(slots=True)
class DNS:
    """Resolver settings (SPEC.md "dns"); all optional."""

    nameservers: list[str] = field(default_factory=list)
    domain: str = ""
    search: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Any) -> DNS:
        if obj is None:
            return cls()
        if not isinstance(obj, Mapping):
            raise _bad("dns", f"expected an object, got {obj!r}")
        return cls(
            nameservers=_str_list(obj, "nameservers", "dns"),
            domain=_str(obj, "domain", "dns"),
            search=_str_list(obj, "search", "dns"),
            options=_str_list(obj, "options", "dns"),
        )

    def is_empty(self) -> bool:
        return not (self.nameservers or self.domain or self.search or self.options)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.nameservers:
            out["nameservers"] = list(self.nameservers)
        if self.domain:
            out["domain"] = self.domain
        if self.search:
            out["search"] = list(self.search)
        if self.options:
            out["options"] = list(self.options)
        return out


@dataclass(slots=True)
class Result:
    """A CNI result, version-neutral; convert with ``to_json(version)``."""

    cni_version: str = "1.1.0"
    interfaces: list[Interface] = field(default_factory=list)
    ips: list[IPConfig] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    dns: DNS = field(default_factory=DNS)

    @classmethod
    def from_json(cls, obj: Any, default_version: str = "") -> Result:
        """Read a result of any version 0.1.0 .. 1.1.0 (see module doc).

        Raises CniError(6) on malformed content and CniError(1) on a version
        this library cannot read.
        """
        if not isinstance(obj, Mapping):
            raise _bad("result", f"expected an object, got {type(obj).__name__}")
        version = _str(obj, "cniVersion", "result") or default_version or "0.1.0"
        if version not in READABLE:
            raise CniError(
                INCOMPATIBLE_VERSION,
                "unsupported CNI result version",
                f"result version {version!r}, readable: {', '.join(READABLE)}",
            )
        if parse(version) < parse("0.3.0"):
            return cls._from_legacy(obj, version)
        ifaces = obj.get("interfaces") or []
        ips = obj.get("ips") or []
        routes = obj.get("routes") or []
        for key, val in (("interfaces", ifaces), ("ips", ips), ("routes", routes)):
            if not isinstance(val, list):
                raise _bad("result", f"{key!r} must be a list, got {val!r}")
        return cls(
            cni_version=version,
            interfaces=[Interface.from_json(i) for i in ifaces],
            ips=[IPConfig.from_json(i) for i in ips],
            routes=[Route.from_json(r) for r in routes],
            dns=DNS.from_json(obj.get("dns")),
        )

    @classmethod
    def _from_legacy(cls, obj: Mapping[str, Any], version: str) -> Result:
        # 0.1.0/0.2.0: {"ip4": {"ip", "gateway", "routes"}, "ip6": {...}}.
        res = cls(cni_version=version, dns=DNS.from_json(obj.get("dns")))
        for key in ("ip4", "ip6"):
            block = obj.get(key)
            if block is None:
                continue
            if not isinstance(block, Mapping) or "ip" not in block:
                raise _bad("result", f"{key!r} must be an object with 'ip'")
            gw = _str(block, "gateway", key)
            res.ips.append(
                IPConfig(
                    address=parse_cidr(_str(block, "ip", key), key),
                    gateway=parse_ip(gw, key) if gw else None,
                )
            )
            for r in block.get("routes") or []:
                res.routes.append(Route.from_json(r))
        return res

    def to_json(self, version: str | None = None) -> dict[str, Any]:
        """The result as a JSON object of ``version`` (default: its own).

        Raises CniError(1) for a version we do not write (0.1.0/0.2.0).
        """
        version = version or self.cni_version
        if version not in ALL:
            raise CniError(
                INCOMPATIBLE_VERSION,
                "cannot convert result",
                f"to version {version!r}; supported: {', '.join(ALL)}",
            )
        out: dict[str, Any] = {"cniVersion": version}
        if self.interfaces:
            out["interfaces"] = [i.to_json(version) for i in self.interfaces]
        if self.ips:
            out["ips"] = [i.to_json(version) for i in self.ips]
        if self.routes:
            out["routes"] = [r.to_json(version) for r in self.routes]
        out["dns"] = self.dns.to_json()
        return out

    def convert(self, version: str) -> Result:
        """A copy at ``version`` with the fields that version cannot carry dropped."""
        return Result.from_json(self.to_json(version))


# --------------------------------------------------------------------------
# NetConf


@dataclass(slots=True)
class NetConf:
    """The fields every plugin config shares (Go ``types.NetConf`` + conventions).

    Plugin configs parse their own keys from ``raw`` (the whole stdin object);
    this base only reads and type-checks the common ones. ``prev_result`` is
    parsed with the config's ``cniVersion`` as the default version, like Go's
    ``version.ParsePrevResult``.
    """

    cni_version: str
    name: str
    type: str
    ipam: dict[str, Any] = field(default_factory=dict)
    dns: DNS = field(default_factory=DNS)
    runtime_config: dict[str, Any] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    prev_result: Result | None = None
    raw_prev_result: dict[str, Any] | None = None
    log_level: str = ""
    log_file: str = ""
    capabilities: dict[str, bool] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, conf: Mapping[str, Any]) -> NetConf:
        """Type-check the common keys (``cni.netconf_fields``: code 6 names the key)."""

        def text(key: str) -> str:
            return fields.opt_str(conf, key) or ""

        def obj(key: str) -> dict[str, Any]:
            return dict(fields.opt_object(conf, key) or {})

        version = text("cniVersion") or "0.1.0"
        caps = obj("capabilities")
        for k in caps:
            fields.opt_bool(caps, k, "capabilities")
        raw_prev = fields.opt_object(conf, "prevResult")
        prev: Result | None = None
        if raw_prev is not None:
            prev = Result.from_json(raw_prev, version)
        ipam = obj("ipam")
        fields.opt_str(ipam, "type", "ipam")
        return cls(
            cni_version=version,
            name=text("name"),
            type=text("type"),
            ipam=ipam,
            dns=DNS.from_json(conf.get("dns")),
            runtime_config=obj("runtimeConfig"),
            args=obj("args"),
            prev_result=prev,
            raw_prev_result=dict(raw_prev) if raw_prev is not None else None,
            log_level=text("logLevel"),
            log_file=text("logFile"),
            capabilities=caps,
            raw=dict(conf),
        )

    @property
    def ipam_type(self) -> str:
        """``ipam.type`` or "" when the config has no IPAM."""
        val = self.ipam.get("type", "")
        return val if isinstance(val, str) else ""


class BaseFields:
    """The ``base`` netconf keys as attributes (``ipam_glue.IpamConf`` needs
    ``name``, ``ipam``, ``ipam_type`` and ``raw``); mixed into the plugins'
    frozen dataclasses, which hold ``base``."""

    __slots__ = ()
    base: NetConf

    @property
    def cni_version(self) -> str:
        return self.base.cni_version

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def ipam(self) -> dict[str, Any]:
        return self.base.ipam

    @property
    def ipam_type(self) -> str:
        return self.base.ipam_type

    @property
    def raw(self) -> dict[str, Any]:
        return self.base.raw
