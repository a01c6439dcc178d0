# SPDX-License-Identifier: Apache-2.0
"""The ib-sriov netconf (k8snetworkplumbingwg/ib-sriov-cni compatible), validated.

Imports only the standard library and the pure ``cni.{args,errors,types}``: a
config error is reported without loading pyroute2 or grpc.

ib-sriov-cni keys (peers.md 2.1): ``deviceID`` (required), ``pkey``,
``link_state``, ``rdmaIsolation`` (default false), ``ibKubernetesEnabled``,
``vfioPciMode``, ``runtimeConfig.infinibandGUID`` > ``args.cni.guid`` (and
CNI_ARGS ``GUID``), ``ipam`` (``dhcp`` refused). A top-level ``guid`` key is
ignored, as the peer does. No MAC or VLAN keys: IPoIB VFs have neither.

Railyard's keys shared with ``sriov`` (README): ``mtu``, ``detectIPConflict``,
``detectGateway``, ``podDefaultRouteNIC``, ``policyRouting``, ``routeTable``,
``rulePriority``. Unknown keys are ignored, as Go's json.Unmarshal does.

Validation the peer lacks: the ``pkey`` must be a 15-bit partition key (hex,
with or without ``0x``; the membership bit 0x8000 is the SM's business) and is
kept in the state so ib-kubernetes tooling can read it back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cni.args import CniArgs, args_cni, requested_guid
from cni.errors import DECODE_FAILURE, INVALID_CONFIG, CniError
from cni.types import NetConf as BaseNetConf

LINK_STATES = {"auto": 0, "enable": 1, "disable": 2}
GUID_RE = re.compile(r"^([0-9a-fA-F]{2}:){7}[0-9a-fA-F]{2}$")
PKEY_RE = re.compile(r"^(0[xX])?[0-9a-fA-F]{1,4}$")
PCI_RE = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
MAX_PKEY = 0x7FFF
IB_APP_KEY = "mellanox.infiniband.app"
IB_APP_CONFIGURED = "configured"
DEFAULT_RULE_PRIORITY = 900  # the same as sriov's, so `ip rule` reads the same
RESERVED_TABLES = frozenset({0, 253, 254, 255})
MAX_TABLE = 2**32 - 1


def _err(msg: str, details: str = "") -> CniError:
    return CniError(INVALID_CONFIG, msg, details)


@dataclass(frozen=True, slots=True)
class IbConf:
    """A validated ib-sriov netconf."""

    base: BaseNetConf
    device_id: str
    guid: str = ""  # lower-case colon hex, "" when none was given
    pkey: str = ""  # normalised "0x7fff", "" when none was given
    link_state: int | None = None
    rdma_isolation: bool = False
    ib_kubernetes: bool = False
    vfio_pci_mode: bool | None = None  # None: detect from the driver
    mtu: int | None = None
    detect_ip_conflict: bool = True
    detect_gateway: bool = True
    pod_default_route_nic: str = ""
    policy_routing: bool = True
    route_table: int | None = None
    rule_priority: int = DEFAULT_RULE_PRIORITY

    @property
    def cni_version(self) -> str:
        return self.base.cni_version

    @property
    def name(self) -> str:
        return self.base.name

    # The three below (and ``name``) make us a ``cni.attach.ipam_glue.IpamConf``.
    @property
    def ipam(self) -> dict[str, Any]:
        return self.base.ipam

    @property
    def ipam_type(self) -> str:
        return self.base.ipam_type

    @property
    def raw(self) -> dict[str, Any]:
        return self.base.raw


# ------------------------------------------------------------------ values


def _get(
    data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str
) -> Any:
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


def _bool(data: Mapping[str, Any], key: str, default: bool) -> bool:
    value = _get(data, key, bool, "bool")
    return default if value is None else bool(value)


def validate_guid(guid: str) -> str:
    """8 bytes of colon hex, not all zero (ib-sriov-cni ``invalid guid %s``)."""
    if not GUID_RE.match(guid) or all(b == "00" for b in guid.split(":")):
        raise _err(
            f"invalid guid {guid}",
            "expected 8 bytes of colon-separated hex, not all zero "
            "(e.g. 02:00:00:00:00:00:00:01)",
        )
    return guid.lower()


def validate_pkey(pkey: str) -> str:
    """A 15-bit partition key as "0x%04x"; "" stays "" (no pkey)."""
    if pkey == "":
        return ""
    if not PKEY_RE.match(pkey):
        raise _err(
            f"invalid pkey {pkey}",
            "expected a hex partition key, with or without 0x (e.g. 0x7fff)",
        )
    value = int(pkey, 16)
    if not 0 < value <= MAX_PKEY:
        raise _err(
            f"invalid pkey {pkey}",
            f"a partition key is 15 bits: 0x0001-0x{MAX_PKEY:04x} (the membership "
            "bit is set by the subnet manager)",
        )
    return f"0x{value:04x}"


def _table(value: int | None) -> int | None:
    if value is None:
        return None
    if value in RESERVED_TABLES or not 0 < value <= MAX_TABLE:
        raise _err(
            f"routeTable {value} invalid: must be 1-{MAX_TABLE} and not a reserved "
            "table (253 default, 254 main, 255 local)"
        )
    return value


# ------------------------------------------------------------------- load


def load_conf(
    data: Mapping[str, Any],
    cni_args: CniArgs | None = None,
    require_device: bool = True,
) -> IbConf:
    """Parse and validate; CniError 6/7 with ib-sriov-cni's messages.

    DEL, GC and STATUS pass ``require_device=False``: they work from the state.
    """
    base = BaseNetConf.from_dict(data)
    device_id = _get(data, "deviceID", str, "string") or ""
    if not device_id and require_device:
        raise _err("LoadConf(): VF pci addr is required")
    if device_id and not PCI_RE.match(device_id):
        raise _err(
            f"LoadConf(): invalid PCI address {device_id}",
            "expected DDDD:BB:DD.F, e.g. 0000:af:00.2",
        )
    link_state = _get(data, "link_state", str, "string") or ""
    if link_state and link_state not in LINK_STATES:
        raise _err(f"LoadConf(): invalid link_state value: {link_state}")
    if base.ipam_type == "dhcp":
        raise _err("ipam type dhcp is not supported")

    ib_kubernetes = _bool(data, "ibKubernetesEnabled", False)
    if ib_kubernetes and args_cni(data).get(IB_APP_KEY) != IB_APP_CONFIGURED:
        raise _err(
            f'infiniBand SRIOV-CNI failed, InfiniBand status "{IB_APP_KEY}" is not '
            f'"{IB_APP_CONFIGURED}" please check mellanox ib-kubernetes'
        )
    guid = requested_guid(data, cni_args or CniArgs())
    if ib_kubernetes and not guid:
        raise _err(
            "infiniband SRIOV-CNI failed, Unexpected error. GUID must be provided "
            "by ib-kubernetes"
        )
    pkey = _get(data, "pkey", str, "string") or ""

    mtu = _get(data, "mtu", int, "int")
    if mtu is not None and mtu <= 0:
        raise _err(f"mtu {mtu} invalid: must be a positive number")
    prio = _get(data, "rulePriority", int, "int")
    if prio is not None and not 0 < prio < 32766:
        raise _err(
            f"rulePriority {prio} invalid: must be 1-32765 (before the main table)"
        )
    return IbConf(
        base=base,
        device_id=device_id.lower(),
        guid=validate_guid(guid) if guid else "",
        pkey=validate_pkey(pkey),
        link_state=LINK_STATES[link_state] if link_state else None,
        rdma_isolation=_bool(data, "rdmaIsolation", False),
        ib_kubernetes=ib_kubernetes,
        vfio_pci_mode=_get(data, "vfioPciMode", bool, "bool"),
        mtu=mtu,
        detect_ip_conflict=_bool(data, "detectIPConflict", True),
        detect_gateway=_bool(data, "detectGateway", True),
        pod_default_route_nic=_get(data, "podDefaultRouteNIC", str, "string") or "",
        policy_routing=_bool(data, "policyRouting", True),
        route_table=_table(_get(data, "routeTable", int, "int")),
        rule_priority=DEFAULT_RULE_PRIORITY if prio is None else prio,
    )
