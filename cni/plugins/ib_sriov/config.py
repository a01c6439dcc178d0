# SPDX-License-Identifier: Apache-2.0
"""The ib-sriov netconf (k8snetworkplumbingwg/ib-sriov-cni compatible), validated.

Imports only the standard library and the pure
``cni.{args,errors,netconf_fields,types}``: a
config error is reported without loading pyroute2 or grpc.

ib-sriov-cni keys: ``deviceID`` (required), ``pkey``,
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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cni import netconf_fields as fields
from cni.args import CniArgs, requested_guid
from cni.netconf_fields import (
    DEFAULT_RULE_PRIORITY,
    args_cni,
    config_error,
    flag,
    opt_bool,
    opt_str,
)
from cni.types import BaseFields
from cni.types import NetConf as BaseNetConf

if TYPE_CHECKING:
    from cni.skel import CmdArgs

IB_APP_KEY = "mellanox.infiniband.app"
IB_APP_CONFIGURED = "configured"


@dataclass(frozen=True, slots=True)
class IbConf(BaseFields):
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


# ------------------------------------------------------------------ values


def validate_guid(guid: str) -> str:
    """8 bytes of colon hex, not all zero (ib-sriov-cni ``invalid guid %s``)."""
    return fields.guid(guid)


def validate_pkey(pkey: str) -> str:
    """A 15-bit partition key as "0x%04x"; "" stays "" (no pkey)."""
    return fields.pkey(pkey)


# ------------------------------------------------------------------- load


def parse_conf(
    data: Mapping[str, Any],
    cni_args: CniArgs | None = None,
    require_device: bool = True,
) -> IbConf:
    """Parse and validate; CniError 6/7 with ib-sriov-cni's messages.

    DEL, GC and STATUS pass ``require_device=False``: they work from the state.
    """
    base = BaseNetConf.from_dict(data)
    device_id = fields.device_id(data, require_device)
    link_state = fields.link_state(data)
    if base.ipam_type == "dhcp":
        raise config_error("ipam type dhcp is not supported")

    ib_kubernetes = flag(data, "ibKubernetesEnabled", False)
    if ib_kubernetes and args_cni(data).get(IB_APP_KEY) != IB_APP_CONFIGURED:
        raise config_error(
            f'infiniBand SRIOV-CNI failed, InfiniBand status "{IB_APP_KEY}" is not '
            f'"{IB_APP_CONFIGURED}" please check mellanox ib-kubernetes'
        )
    guid = requested_guid(data, cni_args or CniArgs())
    if ib_kubernetes and not guid:
        raise config_error(
            "infiniband SRIOV-CNI failed, Unexpected error. GUID must be provided "
            "by ib-kubernetes"
        )
    pkey = opt_str(data, "pkey") or ""

    mtu = fields.mtu(data)
    prio = fields.rule_priority(data)
    return IbConf(
        base=base,
        device_id=device_id,
        guid=validate_guid(guid) if guid else "",
        pkey=validate_pkey(pkey),
        link_state=link_state,
        rdma_isolation=flag(data, "rdmaIsolation", False),
        ib_kubernetes=ib_kubernetes,
        vfio_pci_mode=opt_bool(data, "vfioPciMode"),
        mtu=mtu,
        detect_ip_conflict=flag(data, "detectIPConflict", True),
        detect_gateway=flag(data, "detectGateway", True),
        pod_default_route_nic=opt_str(data, "podDefaultRouteNIC") or "",
        policy_routing=flag(data, "policyRouting", True),
        route_table=fields.route_table(data),
        rule_priority=prio,
    )


def load_conf(args: CmdArgs) -> IbConf:
    """The command's netconf, validated; only ADD requires a ``deviceID``."""
    return parse_conf(args.netconf, args.cni_args, require_device=args.command == "ADD")
