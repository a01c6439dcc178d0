# SPDX-License-Identifier: Apache-2.0
"""Netconf keys the sriov and ib-sriov plugins share, read with the peers' messages.

Imports only the standard library and the pure ``cni.{errors,types}``: a config
error is reported without loading pyroute2 or grpc.

``deviceID``, ``link_state`` keep sriov-cni's / ib-sriov-cni's ``LoadConf()``
messages; a value of the wrong JSON type reads like Go's json.Unmarshal (code
6). The messages are part of compatibility: both plugins' tests pin them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cni.args import runtime_device_id
from cni.errors import DECODE_FAILURE, INVALID_CONFIG, CniError
from cni.types import NetConf as BaseNetConf
from cni.types import is_pci_address

LINK_STATES = {"auto": 0, "enable": 1, "disable": 2}
#: Rule priority used when the netconf names none: below the kernel's main
#: (32766) and default (32767) rules, distinct from coordinator's fwmark rule
#: (1000), and the same for every NIC so ``ip rule`` stays readable.
DEFAULT_RULE_PRIORITY = 900
#: Linux reserves 0 (unspec) and 253..255 (default, main, local).
RESERVED_TABLES = frozenset({0, 253, 254, 255})
MAX_TABLE = 2**32 - 1


def config_error(msg: str, details: str = "") -> CniError:
    return CniError(INVALID_CONFIG, msg, details)


class BaseFields:
    """The ``base`` netconf keys as attributes (``ipam_glue.IpamConf`` needs
    ``name``, ``ipam``, ``ipam_type`` and ``raw``); mixed into the plugins'
    frozen dataclasses, which hold ``base``."""

    __slots__ = ()
    base: BaseNetConf

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


def json_value(
    data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str
) -> Any:
    """``data[key]`` if it is a ``kind`` (None when absent or null), else code 6."""
    value = data.get(key)
    if value is None:
        return None
    # bool is an int subclass; Go's json rejects true for an int field.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CniError(
            DECODE_FAILURE,
            "LoadConf(): failed to load netconf",
            f"json: cannot unmarshal {json.dumps(value)} into field {key} of type "
            f"{what}",
        )
    return value


def opt_int(data: Mapping[str, Any], key: str) -> int | None:
    value: int | None = json_value(data, key, int, "int")
    return value


def opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value: str | None = json_value(data, key, str, "string")
    return value


def device_id(data: Mapping[str, Any], require: bool) -> str:
    """``deviceID`` lower-cased; "" when absent and not ``require``d.

    The top-level key (multus injects it from the device plugin's allocation)
    wins; ``runtimeConfig.deviceID`` (the well-known ``deviceID`` capability:
    cnitool's CAP_ARGS, multus' selection element) is the fallback, as rdma-cni
    reads it too.
    """
    value = opt_str(data, "deviceID") or runtime_device_id(data)
    if not value and require:
        raise config_error("LoadConf(): VF pci addr is required")
    if value and not is_pci_address(value):
        raise config_error(
            f"LoadConf(): invalid PCI address {value}",
            "expected DDDD:BB:DD.F, e.g. 0000:af:00.2",
        )
    return value.lower()


def link_state(data: Mapping[str, Any]) -> int | None:
    """``link_state`` as IFLA_VF_LINK_STATE's number; None leaves it alone."""
    raw = opt_str(data, "link_state") or ""
    if raw and raw not in LINK_STATES:
        raise config_error(f"LoadConf(): invalid link_state value: {raw}")
    return LINK_STATES[raw] if raw else None


def mtu(data: Mapping[str, Any]) -> int | None:
    value = opt_int(data, "mtu")
    if value is not None and value <= 0:
        raise config_error(f"mtu {value} invalid: must be a positive number")
    return value


def rule_priority(data: Mapping[str, Any]) -> int:
    value = opt_int(data, "rulePriority")
    if value is None:
        return DEFAULT_RULE_PRIORITY
    if not 0 < value < 32766:
        raise config_error(
            f"rulePriority {value} invalid: must be 1-32765 (before the main table)"
        )
    return value


def route_table(data: Mapping[str, Any]) -> int | None:
    value = opt_int(data, "routeTable")
    if value is None:
        return None
    if value in RESERVED_TABLES or not 0 < value <= MAX_TABLE:
        raise config_error(
            f"routeTable {value} invalid: must be 1-{MAX_TABLE} and not a reserved "
            "table (253 default, 254 main, 255 local)"
        )
    return value


def detection_window(data: Mapping[str, Any]) -> float:
    """``detectionWindowMs``: the IP-conflict / gateway check window, in seconds.

    Default 90 ms (``cni.attach.detection``); a slow fabric may need more.
    """
    from cni.attach.detection import DEFAULT_WINDOW, MAX_WINDOW

    value = opt_int(data, "detectionWindowMs")
    if value is None:
        return DEFAULT_WINDOW
    if not 10 <= value <= MAX_WINDOW * 1000:
        raise config_error(
            f"detectionWindowMs {value} invalid: must be 10-{int(MAX_WINDOW * 1000)}"
        )
    return value / 1000


def tune_rail_sysctls(data: Mapping[str, Any]) -> bool:
    """``tuneRailSysctls`` (default true): ARP and reverse-path settings on the
    pod NIC (``cni.attach.routing.RAIL_SYSCTLS``); false leaves the pod's own."""
    value: bool | None = json_value(data, "tuneRailSysctls", bool, "bool")
    return True if value is None else value


def cluster_cidrs(data: Mapping[str, Any]) -> tuple[str, ...]:
    """``hijackCIDR`` (Spiderpool's coordinator key): the cluster's service and
    pod CIDRs, routed via eth0's gateway from every rail (``cni.attach.
    routing.with_cluster_routes``). Each entry a CIDR, IPv4 or IPv6."""
    import ipaddress

    value = json_value(data, "hijackCIDR", list, "[]string")
    out = []
    for entry in value or []:
        try:
            out.append(str(ipaddress.ip_network(entry, strict=False)))
        except (TypeError, ValueError):
            raise config_error(
                f"hijackCIDR entry {json.dumps(entry)} invalid: must be a CIDR",
                "e.g. 10.96.0.0/12 (the service CIDR) or 10.244.0.0/16 (pods)",
            ) from None
    return tuple(out)
