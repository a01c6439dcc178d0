# SPDX-License-Identifier: Apache-2.0
"""CNI_ARGS (``K=V;K2=V2``) and the capability/``args.cni`` inputs of a netconf.

``parse_cni_args`` follows Go ``types.LoadArgs``: every pair must be exactly
``K=V`` (``ARGS: invalid pair "x"``), keys are case-sensitive, unknown keys fail
with ``ARGS: unknown args ["K=V"]`` unless ``IgnoreUnknown`` is ``1``/``true``
(any case); values of the boolean key must be 1/0/true/false. Errors are
CniError code 2 (UNSUPPORTED_FIELD: the spec's "the msg must name the key").

The runtime-supplied inputs (SPEC.md "Capabilities" / CONVENTIONS.md):
``runtimeConfig.mac``, ``runtimeConfig.ips``, ``runtimeConfig.infinibandGUID``,
``runtimeConfig.deviceID`` and ``args.cni.{ips,mac,guid}``. Per CONVENTIONS.md
``args.cni.ips`` is preferred over CNI_ARGS ``IP``; the sriov-cni order for
the MAC is runtimeConfig.mac > CNI_ARGS MAC > config ``mac`` (the last is the
plugin's, not read here).

Pure standard library; imports ``cni.errors`` only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cni.errors import INVALID_CONFIG, UNSUPPORTED_FIELD, CniError

#: The keys our plugins accept in CNI_ARGS (multus + sriov-cni + ib-sriov-cni).
KNOWN_KEYS: frozenset[str] = frozenset(
    {
        "IgnoreUnknown",
        "K8S_POD_NAMESPACE",
        "K8S_POD_NAME",
        "K8S_POD_INFRA_CONTAINER_ID",
        "K8S_POD_UID",
        "MAC",
        "IP",
        "GUID",
    }
)


def _go_quote_list(items: Sequence[str]) -> str:
    return "[" + " ".join(json.dumps(i) for i in items) + "]"


def _parse_bool(pair: str, value: str) -> bool:
    low = value.lower()
    if low in ("1", "true"):
        return True
    if low in ("0", "false"):
        return False
    raise CniError(
        UNSUPPORTED_FIELD,
        f"ARGS: error parsing value of pair {json.dumps(pair)}",
        f"boolean unmarshal error: invalid input {low}",
    )


@dataclass(frozen=True, slots=True)
class CniArgs:
    """Parsed CNI_ARGS; absent keys are "" (``mac``/``ip``/``guid`` likewise)."""

    ignore_unknown: bool = False
    k8s_pod_namespace: str = ""
    k8s_pod_name: str = ""
    k8s_pod_infra_container_id: str = ""
    k8s_pod_uid: str = ""
    mac: str = ""
    ip: str = ""  # comma-separated in host-local/static's convention
    guid: str = ""
    unknown: tuple[str, ...] = ()  # the ignored "K=V" pairs, for logging

    @property
    def ips(self) -> tuple[str, ...]:
        """``IP=a,b`` split on commas (host-local/static convention)."""
        return tuple(p.strip() for p in self.ip.split(",") if p.strip())


_FIELDS = {
    "K8S_POD_NAMESPACE": "k8s_pod_namespace",
    "K8S_POD_NAME": "k8s_pod_name",
    "K8S_POD_INFRA_CONTAINER_ID": "k8s_pod_infra_container_id",
    "K8S_POD_UID": "k8s_pod_uid",
    "MAC": "mac",
    "IP": "ip",
    "GUID": "guid",
}


def parse_cni_args(raw: str, known: frozenset[str] = KNOWN_KEYS) -> CniArgs:
    """Parse ``CNI_ARGS`` with Go ``types.LoadArgs`` semantics (see module doc).

    ``known`` lets a plugin accept fewer keys; keys outside ``KNOWN_KEYS`` have
    no field to land in and are treated as unknown.
    """
    if raw == "":
        return CniArgs()
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for pair in raw.split(";"):
        kv = pair.split("=")
        if len(kv) != 2:
            raise CniError(UNSUPPORTED_FIELD, f"ARGS: invalid pair {json.dumps(pair)}")
        key, value = kv
        if key not in known or (key != "IgnoreUnknown" and key not in _FIELDS):
            unknown.append(pair)
            continue
        if key == "IgnoreUnknown":
            values["ignore_unknown"] = _parse_bool(pair, value)
        else:
            values[_FIELDS[key]] = value
    if unknown and not values.get("ignore_unknown", False):
        raise CniError(
            UNSUPPORTED_FIELD, f"ARGS: unknown args {_go_quote_list(unknown)}"
        )
    return CniArgs(unknown=tuple(unknown), **values)


# --------------------------------------------------------------------------
# runtimeConfig and args.cni (netconf dict in, plain values out)


def _conf_err(key: str, want: str, val: Any) -> CniError:
    return CniError(
        INVALID_CONFIG, "invalid network config", f"{key} must be {want}, got {val!r}"
    )


def _section(conf: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    cur: Mapping[str, Any] = conf
    for i, key in enumerate(path):
        val = cur.get(key)
        if val is None:
            return {}
        if not isinstance(val, Mapping):
            raise _conf_err(".".join(path[: i + 1]), "an object", val)
        cur = val
    return cur


def _opt_str(section: Mapping[str, Any], key: str, where: str) -> str:
    val = section.get(key)
    if val is None:
        return ""
    if not isinstance(val, str):
        raise _conf_err(f"{where}.{key}", "a string", val)
    return val


def _str_list(section: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    val = section.get(key)
    if val is None:
        return ()
    if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
        raise _conf_err(f"{where}.{key}", "a list of strings", val)
    return tuple(val)


def runtime_mac(conf: Mapping[str, Any]) -> str:
    """``runtimeConfig.mac`` (capability ``mac``) or ""."""
    return _opt_str(_section(conf, "runtimeConfig"), "mac", "runtimeConfig")


def runtime_ips(conf: Mapping[str, Any]) -> tuple[str, ...]:
    """``runtimeConfig.ips`` (capability ``ips``): CIDRs the runtime asks for."""
    return _str_list(_section(conf, "runtimeConfig"), "ips", "runtimeConfig")


def runtime_infiniband_guid(conf: Mapping[str, Any]) -> str:
    """``runtimeConfig.infinibandGUID`` (capability ``infinibandGUID``) or ""."""
    return _opt_str(_section(conf, "runtimeConfig"), "infinibandGUID", "runtimeConfig")


def runtime_device_id(conf: Mapping[str, Any]) -> str:
    """``runtimeConfig.deviceID`` (capability ``deviceID``) or ""."""
    return _opt_str(_section(conf, "runtimeConfig"), "deviceID", "runtimeConfig")


def args_cni(conf: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``args.cni`` object (multus ``cni-args``) or {}."""
    return _section(conf, "args", "cni")


def args_cni_ips(conf: Mapping[str, Any]) -> tuple[str, ...]:
    """``args.cni.ips`` (CONVENTIONS.md), preferred over CNI_ARGS ``IP``."""
    return _str_list(args_cni(conf), "ips", "args.cni")


def args_cni_guid(conf: Mapping[str, Any]) -> str:
    """``args.cni.guid`` (ib-sriov-cni) or ""."""
    return _opt_str(args_cni(conf), "guid", "args.cni")


def args_cni_mac(conf: Mapping[str, Any]) -> str:
    """``args.cni.mac`` or ""."""
    return _opt_str(args_cni(conf), "mac", "args.cni")


def requested_ips(conf: Mapping[str, Any], cni_args: CniArgs) -> tuple[str, ...]:
    """Static IPs asked for: runtimeConfig.ips > args.cni.ips > CNI_ARGS IP."""
    return runtime_ips(conf) or args_cni_ips(conf) or cni_args.ips


def requested_mac(conf: Mapping[str, Any], cni_args: CniArgs) -> str:
    """MAC asked for: runtimeConfig.mac > args.cni.mac > CNI_ARGS MAC (or "")."""
    return runtime_mac(conf) or args_cni_mac(conf) or cni_args.mac


def requested_guid(conf: Mapping[str, Any], cni_args: CniArgs) -> str:
    """IB GUID asked for: runtimeConfig.infinibandGUID > args.cni.guid > GUID."""
    return runtime_infiniband_guid(conf) or args_cni_guid(conf) or cni_args.guid
