# SPDX-License-Identifier: Apache-2.0
"""CNI_ARGS (``K=V;K2=V2``), and which of it and the netconf's runtime inputs wins.

``parse_cni_args`` follows Go ``types.LoadArgs``: every pair must be exactly
``K=V`` (``ARGS: invalid pair "x"``), keys are case-sensitive, unknown keys fail
with ``ARGS: unknown args ["K=V"]`` unless ``IgnoreUnknown`` is ``1``/``true``
(any case); values of the boolean key must be 1/0/true/false. Errors are
CniError code 2 (UNSUPPORTED_FIELD: the spec's "the msg must name the key").

The runtime-supplied inputs of the netconf (SPEC.md "Capabilities" /
CONVENTIONS.md: ``runtimeConfig.{mac,ips,infinibandGUID,deviceID}``,
``args.cni.{ips,mac,guid}``) are read by ``cni.netconf_fields``. Per CONVENTIONS.md
``args.cni.ips`` is preferred over CNI_ARGS ``IP``; the sriov-cni order for
the MAC is runtimeConfig.mac > CNI_ARGS MAC > config ``mac`` (the last is the
plugin's, not read here).

Pure standard library; imports ``cni.errors`` and ``cni.netconf_fields``
(which reads the netconf's values) only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cni.errors import UNSUPPORTED_FIELD, CniError
from cni.netconf_fields import (
    args_cni_guid,
    args_cni_ips,
    args_cni_mac,
    runtime_infiniband_guid,
    runtime_ips,
    runtime_mac,
)

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
# Precedence between the netconf's runtime inputs and CNI_ARGS


def requested_ips(conf: Mapping[str, Any], cni_args: CniArgs) -> tuple[str, ...]:
    """Static IPs asked for: runtimeConfig.ips > args.cni.ips > CNI_ARGS IP."""
    return runtime_ips(conf) or args_cni_ips(conf) or cni_args.ips


def requested_mac(conf: Mapping[str, Any], cni_args: CniArgs) -> str:
    """MAC asked for: runtimeConfig.mac > args.cni.mac > CNI_ARGS MAC (or "")."""
    return runtime_mac(conf) or args_cni_mac(conf) or cni_args.mac


def requested_guid(conf: Mapping[str, Any], cni_args: CniArgs) -> str:
    """IB GUID asked for: runtimeConfig.infinibandGUID > args.cni.guid > GUID."""
    return runtime_infiniband_guid(conf) or args_cni_guid(conf) or cni_args.guid
