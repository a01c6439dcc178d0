# SPDX-License-Identifier: Apache-2.0
"""What a valid ADD result and a valid error look like, one validator per spec version.

Standard library only. Each validator returns a list of problems (empty when the
document conforms) instead of raising, so a test can show all of them at once.
Keys a version does not define are reported: the result shapes are closed in the
spec, and a 1.1 field in a 1.0.0 result is exactly the kind of version mix-up
a runtime converting results would trip over.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any

MAC_RE = re.compile(
    r"^([0-9a-fA-F]{2}[:-]){5}[0-9a-fA-F]{2}$|^([0-9a-fA-F]{2}:){19}[0-9a-fA-F]{2}$"
)
SEMVER_RE = re.compile(r"^\d+\.\d+\.\d+$")
DNS_KEYS = {"nameservers", "domain", "search", "options"}


def _cidr(value: Any) -> bool:
    if not isinstance(value, str) or "/" not in value:
        return False
    try:
        ipaddress.ip_interface(value)
    except ValueError:
        return False
    return True


def _ip(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _unknown(where: str, obj: dict[str, Any], allowed: set[str]) -> list[str]:
    return [
        f"{where}: key {k!r} is not defined in this version"
        for k in obj
        if k not in allowed
    ]


def _check_dns(dns: Any) -> list[str]:
    if not isinstance(dns, dict):
        return ["dns: not an object"]
    problems = _unknown("dns", dns, DNS_KEYS)
    for key in ("nameservers", "search", "options"):
        if key in dns and not (
            isinstance(dns[key], list) and all(isinstance(x, str) for x in dns[key])
        ):
            problems.append(f"dns.{key}: not a list of strings")
    for ns in dns.get("nameservers") or []:
        if isinstance(ns, str) and not _ip(ns):
            problems.append(f"dns.nameservers: {ns!r} is not an IP address")
    if "domain" in dns and not isinstance(dns["domain"], str):
        problems.append("dns.domain: not a string")
    return problems


def _check_routes(where: str, routes: Any, allowed: set[str]) -> list[str]:
    if not isinstance(routes, list):
        return [f"{where}: not a list"]
    problems: list[str] = []
    for i, route in enumerate(routes):
        at = f"{where}[{i}]"
        if not isinstance(route, dict):
            problems.append(f"{at}: not an object")
            continue
        problems += _unknown(at, route, allowed)
        if not _cidr(route.get("dst")):
            problems.append(f"{at}.dst: {route.get('dst')!r} is not a CIDR")
        if "gw" in route and not _ip(route["gw"]):
            problems.append(f"{at}.gw: {route['gw']!r} is not an IP address")
        for key in ("mtu", "advmss", "priority", "table"):
            if key in route and not (isinstance(route[key], int) and route[key] >= 0):
                problems.append(f"{at}.{key}: not a non-negative integer")
        if "scope" in route and not isinstance(route["scope"], int):
            problems.append(f"{at}.scope: not an integer")
    return problems


def _check_version(result: dict[str, Any], version: str) -> list[str]:
    got = result.get("cniVersion")
    if got != version:
        return [f"cniVersion: {got!r}, but the config asked for {version!r}"]
    return []


def validate_020(result: Any, version: str) -> list[str]:
    """0.1.0 and 0.2.0: ``ip4``/``ip6`` objects, no interfaces."""
    if not isinstance(result, dict):
        return ["result: not an object"]
    problems = _check_version(result, version)
    problems += _unknown("result", result, {"cniVersion", "ip4", "ip6", "dns"})
    for family in ("ip4", "ip6"):
        if family not in result:
            continue
        cfg = result[family]
        if not isinstance(cfg, dict):
            problems.append(f"{family}: not an object")
            continue
        problems += _unknown(family, cfg, {"ip", "gateway", "routes"})
        if not _cidr(cfg.get("ip")):
            problems.append(f"{family}.ip: {cfg.get('ip')!r} is not a CIDR")
        if "gateway" in cfg and not _ip(cfg["gateway"]):
            problems.append(
                f"{family}.gateway: {cfg['gateway']!r} is not an IP address"
            )
        if "routes" in cfg:
            problems += _check_routes(f"{family}.routes", cfg["routes"], {"dst", "gw"})
    if "dns" in result:
        problems += _check_dns(result["dns"])
    return problems


def _validate_current(
    result: Any,
    version: str,
    *,
    ip_keys: set[str],
    ip_version_required: bool,
    iface_keys: set[str],
    route_keys: set[str],
) -> list[str]:
    if not isinstance(result, dict):
        return ["result: not an object"]
    problems = _check_version(result, version)
    problems += _unknown(
        "result", result, {"cniVersion", "interfaces", "ips", "routes", "dns"}
    )
    interfaces = result.get("interfaces", [])
    if not isinstance(interfaces, list):
        problems.append("interfaces: not a list")
        interfaces = []
    for i, iface in enumerate(interfaces):
        at = f"interfaces[{i}]"
        if not isinstance(iface, dict):
            problems.append(f"{at}: not an object")
            continue
        problems += _unknown(at, iface, iface_keys)
        if not isinstance(iface.get("name"), str) or not iface.get("name"):
            problems.append(f"{at}.name: missing or empty")
        if "mac" in iface and not (
            isinstance(iface["mac"], str) and MAC_RE.match(iface["mac"])
        ):
            problems.append(f"{at}.mac: {iface['mac']!r} is not a hardware address")
        for key in ("sandbox", "socketPath", "pciID"):
            if key in iface and not isinstance(iface[key], str):
                problems.append(f"{at}.{key}: not a string")
        if "mtu" in iface and not (isinstance(iface["mtu"], int) and iface["mtu"] > 0):
            problems.append(f"{at}.mtu: not a positive integer")
    ips = result.get("ips", [])
    if not isinstance(ips, list):
        problems.append("ips: not a list")
        ips = []
    for i, ip in enumerate(ips):
        at = f"ips[{i}]"
        if not isinstance(ip, dict):
            problems.append(f"{at}: not an object")
            continue
        problems += _unknown(at, ip, ip_keys)
        address = ip.get("address")
        if not _cidr(address):
            problems.append(f"{at}.address: {address!r} is not a CIDR")
        if "gateway" in ip and not _ip(ip["gateway"]):
            problems.append(f"{at}.gateway: {ip['gateway']!r} is not an IP address")
        if ip_version_required:
            family = ip.get("version")
            if family not in ("4", "6"):
                problems.append(f'{at}.version: {family!r}, must be "4" or "6"')
            elif _cidr(address) and ipaddress.ip_interface(address).version != int(
                family
            ):
                problems.append(f"{at}.version: {family} does not match {address}")
        if "interface" in ip:
            idx = ip["interface"]
            if not isinstance(idx, int) or isinstance(idx, bool):
                problems.append(f"{at}.interface: not an integer index")
            elif not 0 <= idx < len(interfaces):
                problems.append(f"{at}.interface: index {idx} outside interfaces")
    if "routes" in result:
        problems += _check_routes("routes", result["routes"], route_keys)
    if "dns" in result:
        problems += _check_dns(result["dns"])
    return problems


def validate_03x(result: Any, version: str) -> list[str]:
    """0.3.0, 0.3.1 and 0.4.0: interfaces + ips carrying ``version``."""
    return _validate_current(
        result,
        version,
        ip_keys={"version", "address", "gateway", "interface"},
        ip_version_required=True,
        iface_keys={"name", "mac", "sandbox"},
        route_keys={"dst", "gw"},
    )


def validate_100(result: Any, version: str) -> list[str]:
    """1.0.0: as 0.4.0 but ``ips[].version`` is gone."""
    return _validate_current(
        result,
        version,
        ip_keys={"address", "gateway", "interface"},
        ip_version_required=False,
        iface_keys={"name", "mac", "sandbox"},
        route_keys={"dst", "gw"},
    )


def validate_110(result: Any, version: str) -> list[str]:
    """1.1.0: interfaces gain mtu/socketPath/pciID, routes mtu/advmss/priority/
    table/scope."""
    return _validate_current(
        result,
        version,
        ip_keys={"address", "gateway", "interface"},
        ip_version_required=False,
        iface_keys={"name", "mac", "mtu", "sandbox", "socketPath", "pciID"},
        route_keys={"dst", "gw", "mtu", "advmss", "priority", "table", "scope"},
    )


VALIDATORS: dict[str, Callable[[Any, str], list[str]]] = {
    "0.1.0": validate_020,
    "0.2.0": validate_020,
    "0.3.0": validate_03x,
    "0.3.1": validate_03x,
    "0.4.0": validate_03x,
    "1.0.0": validate_100,
    "1.1.0": validate_110,
}


def validate_result(result: Any, version: str) -> list[str]:
    return VALIDATORS[version](result, version)


def validate_error(error: Any, *, expect_version: str | None) -> list[str]:
    """The spec's error document: ``{cniVersion, code, msg[, details]}``.

    ``expect_version`` is the config's cniVersion when the plugin could read it
    (``None`` when stdin was not a config at all: any semver is then fine).
    """
    if not isinstance(error, dict):
        return ["error: not a JSON object"]
    problems = _unknown("error", error, {"cniVersion", "code", "msg", "details"})
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool) or code < 0:
        problems.append(f"code: {code!r} is not a non-negative integer")
    if not isinstance(error.get("msg"), str) or not error.get("msg"):
        problems.append("msg: missing or empty")
    if "details" in error and not isinstance(error["details"], str):
        problems.append("details: not a string")
    if "cniVersion" not in error:
        problems.append("cniVersion: missing")
    elif not (
        isinstance(error["cniVersion"], str) and SEMVER_RE.match(error["cniVersion"])
    ):
        problems.append(f"cniVersion: {error['cniVersion']!r} is not a version")
    elif expect_version is not None and error["cniVersion"] != expect_version:
        problems.append(
            f"cniVersion: {error['cniVersion']!r}, config said {expect_version!r}"
        )
    return problems


def validate_version_info(info: Any) -> list[str]:
    """VERSION's output: ``{cniVersion, supportedVersions}``."""
    if not isinstance(info, dict):
        return ["VERSION: not a JSON object"]
    problems = _unknown("VERSION", info, {"cniVersion", "supportedVersions"})
    supported = info.get("supportedVersions")
    if not (isinstance(supported, list) and supported):
        return problems + ["supportedVersions: missing or empty"]
    for v in supported:
        if not (isinstance(v, str) and SEMVER_RE.match(v)):
            problems.append(f"supportedVersions: {v!r} is not a version")
    current = info.get("cniVersion")
    if not (isinstance(current, str) and SEMVER_RE.match(current)):
        problems.append(f"cniVersion: {current!r} is not a version")
    return problems
