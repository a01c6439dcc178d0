# SPDX-License-Identifier: Apache-2.0
"""Every netconf value a plugin reads, typed and validated: the one place to add a key.

Standard library and ``cni.errors`` only, so a config error is reported before
anything heavy loads, by every plugin, ``cni.types`` and ``cni.args`` alike.

Three kinds of reader, one error contract each:

- typed getters, ``opt_str``/``opt_int``/``opt_bool``/``opt_object``/
  ``str_list`` (None or empty when the key is absent or null) and ``flag``
  (a boolean with its default): a value of the wrong JSON type is code 6 with
  Go's json.Unmarshal message naming the key's path, as the Go peers decode
  their netconf (``at`` names the section: ``"runtimeConfig"``);
- the shared keys (``device_id``, ``link_state``, ``mtu``, ``route_table``,
  ``rule_priority``, ``detection_window``) and the runtime's inputs
  (``runtimeConfig.*``, ``args.cni.*``), read with the peers' messages;
- value validators (``mac``, ``guid``, ``pkey``, ``tx_rate``,
  ``is_pci_address``): a value out of range or form is code 7 naming the field
  and what it allows (``config_error``).

Patterns are matched whole (``re.fullmatch``): ``$`` would also match before a
trailing newline, and ``"02:00:00:00:00:01\\n"`` would reach the kernel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from cni.errors import DECODE_FAILURE, INVALID_CONFIG, CniError

Data = Mapping[str, Any]


def config_error(msg: str, details: str = "") -> CniError:
    """A value of the right type the plugin cannot take (code 7)."""
    return CniError(INVALID_CONFIG, msg, details)


# ------------------------------------------------------------ typed getters


def _typed(data: Data, key: str, kind: type, go_type: str, at: str) -> Any:
    value = data.get(key)
    if value is None:
        return None
    # bool is an int subclass; Go's json rejects true for an int field.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        path = f"{at}.{key}" if at else key
        raise CniError(
            DECODE_FAILURE,
            "LoadConf(): failed to load netconf",
            f"json: cannot unmarshal {_shown(json.dumps(value))} into field {path} "
            f"of type {go_type}",
        )
    return value


def opt_str(data: Data, key: str, at: str = "") -> str | None:
    """``data[key]`` as a string; None when absent or null."""
    value: str | None = _typed(data, key, str, "string", at)
    return value


def opt_int(data: Data, key: str, at: str = "") -> int | None:
    """``data[key]`` as an integer (never a boolean); None when absent or null."""
    value: int | None = _typed(data, key, int, "int", at)
    return value


def opt_bool(data: Data, key: str, at: str = "") -> bool | None:
    """``data[key]`` as a boolean; None when absent or null (e.g. "detect")."""
    value: bool | None = _typed(data, key, bool, "bool", at)
    return value


def flag(data: Data, key: str, default: bool, at: str = "") -> bool:
    """``data[key]`` as a boolean, ``default`` when absent or null."""
    value = opt_bool(data, key, at)
    return default if value is None else value


def opt_object(data: Data, key: str, at: str = "") -> Mapping[str, Any] | None:
    """``data[key]`` as a JSON object; None when absent or null."""
    value: Mapping[str, Any] | None = _typed(
        data, key, Mapping, "map[string]interface {}", at
    )
    return value


def section(data: Data, *path: str) -> Mapping[str, Any]:
    """The object at ``path`` (``section(d, "args", "cni")``); {} when absent."""
    cur: Mapping[str, Any] = data
    for i, key in enumerate(path):
        found = opt_object(cur, key, ".".join(path[:i]))
        if found is None:
            return {}
        cur = found
    return cur


def str_list(data: Data, key: str, at: str = "") -> tuple[str, ...]:
    """``data[key]`` as a list of strings; () when absent or null."""
    value = _typed(data, key, list, "[]string", at)
    if value is None:
        return ()
    for item in value:
        _typed({key: item}, key, str, "string", at)
    return tuple(value)


# ------------------------------------------------- the runtime's inputs
# SPEC.md "Capabilities" / CONVENTIONS.md: runtimeConfig.<capability> and
# args.cni.<key>; the precedence between them and CNI_ARGS is ``cni.args``'s.


def runtime_mac(data: Data) -> str:
    """``runtimeConfig.mac`` (capability ``mac``) or ""."""
    return opt_str(section(data, "runtimeConfig"), "mac", "runtimeConfig") or ""


def runtime_ips(data: Data) -> tuple[str, ...]:
    """``runtimeConfig.ips`` (capability ``ips``): CIDRs the runtime asks for."""
    return str_list(section(data, "runtimeConfig"), "ips", "runtimeConfig")


def runtime_infiniband_guid(data: Data) -> str:
    """``runtimeConfig.infinibandGUID`` (capability ``infinibandGUID``) or ""."""
    rc = section(data, "runtimeConfig")
    return opt_str(rc, "infinibandGUID", "runtimeConfig") or ""


def runtime_device_id(data: Data) -> str:
    """``runtimeConfig.deviceID`` (capability ``deviceID``) or ""."""
    return opt_str(section(data, "runtimeConfig"), "deviceID", "runtimeConfig") or ""


def args_cni(data: Data) -> Mapping[str, Any]:
    """The ``args.cni`` object (multus ``cni-args``) or {}."""
    return section(data, "args", "cni")


def args_cni_ips(data: Data) -> tuple[str, ...]:
    """``args.cni.ips`` (CONVENTIONS.md), preferred over CNI_ARGS ``IP``."""
    return str_list(args_cni(data), "ips", "args.cni")


def args_cni_guid(data: Data) -> str:
    """``args.cni.guid`` (ib-sriov-cni) or ""."""
    return opt_str(args_cni(data), "guid", "args.cni") or ""


def args_cni_mac(data: Data) -> str:
    """``args.cni.mac`` or ""."""
    return opt_str(args_cni(data), "mac", "args.cni") or ""


# ------------------------------------------------------------- shared keys
# sriov-cni's / ib-sriov-cni's ``LoadConf()`` messages are part of
# compatibility: both plugins' tests pin them.

LINK_STATES = {"auto": 0, "enable": 1, "disable": 2}
#: Rule priority used when the netconf names none: below the kernel's main
#: (32766) and default (32767) rules, distinct from coordinator's fwmark rule
#: (1000), and the same for every NIC so ``ip rule`` stays readable.
DEFAULT_RULE_PRIORITY = 900
#: Linux reserves 0 (unspec) and 253..255 (default, main, local).
RESERVED_TABLES = frozenset({0, 253, 254, 255})
MAX_TABLE = 2**32 - 1
#: The IP-conflict / gateway check window (``cni.attach.detection``): 90 ms
#: probes at 0, 30 and 60 ms; a slow fabric may need more.
DEFAULT_DETECTION_WINDOW_MS = 90
MAX_DETECTION_WINDOW_MS = 10_000


def device_id(data: Data, require: bool) -> str:
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
            f"LoadConf(): invalid PCI address {_shown(value)}",
            "expected DDDD:BB:DD.F, e.g. 0000:af:00.2",
        )
    return value.lower()


def link_state(data: Data) -> int | None:
    """``link_state`` as IFLA_VF_LINK_STATE's number; None leaves it alone."""
    raw = opt_str(data, "link_state") or ""
    if raw and raw not in LINK_STATES:
        raise config_error(f"LoadConf(): invalid link_state value: {_shown(raw)}")
    return LINK_STATES[raw] if raw else None


def mtu(data: Data) -> int | None:
    """``mtu`` of the pod's netdev; None leaves the VF's."""
    value = opt_int(data, "mtu")
    if value is not None and value <= 0:
        raise config_error(f"mtu {value} invalid: must be a positive number")
    return value


def rule_priority(data: Data) -> int:
    """``rulePriority`` of the per-NIC policy rules."""
    value = opt_int(data, "rulePriority")
    if value is None:
        return DEFAULT_RULE_PRIORITY
    if not 0 < value < 32766:
        raise config_error(
            f"rulePriority {value} invalid: must be 1-32765 (before the main table)"
        )
    return value


def route_table(data: Data) -> int | None:
    """``routeTable`` of the per-NIC routes; None picks one per NIC."""
    value = opt_int(data, "routeTable")
    if value is None:
        return None
    if value in RESERVED_TABLES or not 0 < value <= MAX_TABLE:
        raise config_error(
            f"routeTable {value} invalid: must be 1-{MAX_TABLE} and not a reserved "
            "table (253 default, 254 main, 255 local)"
        )
    return value


def detection_window(data: Data) -> float:
    """``detectionWindowMs``: the IP-conflict / gateway check window, in seconds."""
    value = opt_int(data, "detectionWindowMs")
    if value is None:
        return DEFAULT_DETECTION_WINDOW_MS / 1000
    if not 10 <= value <= MAX_DETECTION_WINDOW_MS:
        raise config_error(
            f"detectionWindowMs {value} invalid: must be 10-{MAX_DETECTION_WINDOW_MS}"
        )
    return value / 1000


# -------------------------------------------------------- value validators

#: A full PCI function address, DDDD:BB:DD.F ("0000:af:00.2"): the one
#: validator of ``deviceID`` and of every address sysfs is asked about.
PCI_ADDRESS = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def is_pci_address(value: str) -> bool:
    """True for a full PCI function address such as ``0000:af:00.2``."""
    return PCI_ADDRESS.fullmatch(value) is not None


_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
_GUID = re.compile(r"([0-9a-fA-F]{2}:){7}[0-9a-fA-F]{2}")
_PKEY = re.compile(r"(0[xX])?[0-9a-fA-F]{1,4}")

#: IFLA_VF_RATE carries min/max_tx_rate as unsigned 32-bit Mbps.
MAX_TX_RATE = 2**32 - 1
#: A partition key is 15 bits; the 16th (full membership) is the SM's.
MAX_PKEY = 0x7FFF


def _shown(value: str) -> str:
    """The value as the peers print it, quoted with escapes visible when it
    holds anything unprintable, and cut short for a log line."""
    text = value if value.isprintable() else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def mac(value: str, field: str = "mac") -> str:
    """An Ethernet MAC as lower-case colon hex."""
    if not _MAC.fullmatch(value):
        raise CniError(
            INVALID_CONFIG,
            f"failed to parse MAC address {_shown(value)}",
            f"{field}: expected six colon-separated hex bytes, xx:xx:xx:xx:xx:xx",
        )
    return value.lower()


def guid(value: str, field: str = "guid") -> str:
    """An InfiniBand GUID: 8 bytes of colon hex, not all zero; lower-cased."""
    if not _GUID.fullmatch(value) or all(b == "00" for b in value.split(":")):
        raise CniError(
            INVALID_CONFIG,
            f"invalid guid {_shown(value)}",
            f"{field}: expected 8 bytes of colon-separated hex, not all zero "
            "(e.g. 02:00:00:00:00:00:00:01)",
        )
    return value.lower()


def pkey(value: str, field: str = "pkey") -> str:
    """A 15-bit partition key as ``0x%04x``; "" stays "" (no pkey)."""
    if value == "":
        return ""
    if not _PKEY.fullmatch(value):
        raise CniError(
            INVALID_CONFIG,
            f"invalid pkey {_shown(value)}",
            f"{field}: expected a hex partition key, with or without 0x (e.g. 0x7fff)",
        )
    number = int(value, 16)
    if not 0 < number <= MAX_PKEY:
        raise CniError(
            INVALID_CONFIG,
            f"invalid pkey {_shown(value)}",
            f"{field}: a partition key is 15 bits: 0x0001-0x{MAX_PKEY:04x} (the "
            "membership bit is set by the subnet manager)",
        )
    return f"0x{number:04x}"


def tx_rate(value: int | None, field: str) -> int | None:
    """``min_tx_rate``/``max_tx_rate`` in Mbps: 0 (no limit) to 2**32-1."""
    if value is None:
        return None
    if not 0 <= value <= MAX_TX_RATE:
        # str() of a huge int is slow and, past 4300 digits, refused.
        bits = value.bit_length()
        shown = str(value) if bits <= 64 else f"(a {bits}-bit number)"
        raise CniError(
            INVALID_CONFIG,
            f"{field} {shown} invalid: must be 0-{MAX_TX_RATE} Mbps",
            f"{field}: the VF rate limit is an unsigned 32-bit number of Mbps "
            "(0 means no limit)",
        )
    return value
