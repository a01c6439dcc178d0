# SPDX-License-Identifier: Apache-2.0
"""The sriov netconf: sriov-cni's fields, defaults and validation messages, plus ours.

Imports only the standard library and the pure
``cni.{args,errors,netconf_fields,types}``: a
config error must be reported without loading pyroute2 or grpc.

Field names and messages follow k8snetworkplumbingwg/sriov-cni
``pkg/config/config.go`` (``LoadConf``) so logs and tests written against the Go
plugin read the same. Railyard's additions (``mtu``, ``detectIPConflict``,
``detectGateway``, ``podDefaultRouteNIC``, ``rdmaIsolation``/``enableRdma``,
``policyRouting``, ``routeTable``, ``rulePriority``) are documented in README.md.
Keys we do not know are ignored, as Go's json.Unmarshal does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cni import netconf_fields as fields
from cni.args import CniArgs, requested_mac
from cni.errors import DECODE_FAILURE, CniError
from cni.netconf_fields import (
    DEFAULT_RULE_PRIORITY,
    config_error,
    flag,
    opt_int,
    opt_str,
)
from cni.types import BaseFields
from cni.types import NetConf as BaseNetConf

if TYPE_CHECKING:
    from cni.skel import CmdArgs

PROTO_8021Q = "802.1q"
PROTO_8021AD = "802.1ad"
#: IFLA_VF_VLAN_INFO ``vlan_proto`` values (ETH_P_8021Q / ETH_P_8021AD).
VLAN_PROTO_NUMBERS = {PROTO_8021Q: 0x8100, PROTO_8021AD: 0x88A8}


@dataclass(frozen=True, slots=True)
class NetConf(BaseFields):
    """A validated sriov netconf (one plugin of a conflist, as stdin carries it).

    ``base`` holds the keys every plugin shares (cniVersion, name, ipam,
    runtimeConfig, args, prevResult, logLevel/logFile), type-checked by core.
    """

    base: BaseNetConf
    device_id: str
    vlan: int | None = None
    vlan_qos: int | None = None
    vlan_proto: str | None = None  # lower-case "802.1q" / "802.1ad"
    mac: str = ""  # effective request after CNI_ARGS / runtimeConfig precedence
    spoofchk: bool | None = None
    trust: bool | None = None
    link_state: int | None = None
    min_tx_rate: int | None = None
    max_tx_rate: int | None = None
    mtu: int | None = None
    detect_ip_conflict: bool = True
    detect_gateway: bool = True
    pod_default_route_nic: str = ""
    rdma_isolation: bool = False
    policy_routing: bool = True
    route_table: int | None = None
    rule_priority: int = DEFAULT_RULE_PRIORITY

    @property
    def vlan_proto_number(self) -> int:
        return VLAN_PROTO_NUMBERS[self.vlan_proto or PROTO_8021Q]


def decode(stdin: bytes | str) -> dict[str, Any]:
    """Parse stdin into a JSON object, or raise code 6 with Go's prefix."""
    try:
        data = json.loads(stdin)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CniError(
            DECODE_FAILURE, "LoadConf(): failed to load netconf", str(exc)
        ) from exc
    if not isinstance(data, dict):
        raise CniError(
            DECODE_FAILURE,
            "LoadConf(): failed to load netconf",
            f"expected a JSON object, got {type(data).__name__}",
        )
    return data


def _on_off(value: str | None) -> bool | None:
    # sriov-cni: "on" -> true, any other non-empty value -> false, "" -> untouched.
    if not value:
        return None
    return value == "on"


def _validate_vlan(
    vlan: int | None, qos: int | None, proto: str | None
) -> tuple[int | None, str | None]:
    """sriov-cni's VLAN rules, in its order; returns (qos, proto) with defaults."""
    if vlan is None:
        if qos is not None:
            raise config_error(
                "LoadConf(): vlan id must be configured to set vlan QoS to a "
                "non-nil value"
            )
        if proto is not None:
            raise config_error(
                "LoadConf(): vlan id must be configured to set vlan proto to a "
                "non-nil value"
            )
        return None, None
    if not 0 <= vlan <= 4094:
        raise config_error(
            f"LoadConf(): vlan id {vlan} invalid: value must be in the range 0-4094"
        )
    qos = 0 if qos is None else qos
    if not 0 <= qos <= 7:
        raise config_error(
            f"LoadConf(): vlan QoS PCP {qos} invalid: value must be in the range 0-7"
        )
    if qos != 0 and vlan == 0:
        raise config_error(
            "LoadConf(): non-zero vlan id must be configured to set vlan QoS to a "
            "non-zero value"
        )
    proto = (proto or PROTO_8021Q).lower()
    if proto not in VLAN_PROTO_NUMBERS:
        raise config_error(
            f"LoadConf(): vlan Proto {proto} invalid: value must be '802.1Q' or "
            "'802.1ad'"
        )
    if proto == PROTO_8021AD and vlan == 0:
        raise config_error(
            "LoadConf(): non-zero vlan id must be configured to set vlan proto 802.1ad"
        )
    return qos, proto


def _validate_mac(mac: str) -> str:
    # sriov-cni parses it only when applying; we fail before touching the VF.
    return fields.mac(mac) if mac else ""


def parse_conf(
    stdin: bytes | str | Mapping[str, Any],
    cni_args: CniArgs | None = None,
    require_device: bool = True,
) -> NetConf:
    """Parse and validate a sriov netconf; raises CniError 6 or 7.

    The MAC asked for is runtimeConfig.mac > args.cni.mac > CNI_ARGS ``MAC`` >
    the netconf's ``mac`` (sriov-cni ``cmdAdd`` order). Nothing here touches
    sysfs: resolving the VF from ``deviceID`` is the ADD's first step.
    DEL, GC and STATUS pass ``require_device=False``: they work from the cache
    (GC and STATUS never carry a ``deviceID``).
    """
    data = dict(stdin) if isinstance(stdin, Mapping) else decode(stdin)
    base = BaseNetConf.from_dict(data)
    device_id = fields.device_id(data, require_device)
    vlan = opt_int(data, "vlan")
    qos, proto = _validate_vlan(
        vlan, opt_int(data, "vlanQoS"), opt_str(data, "vlanProto")
    )
    link_state = fields.link_state(data)

    mac = requested_mac(data, cni_args or CniArgs()) or opt_str(data, "mac") or ""

    mtu = fields.mtu(data)
    min_tx_rate = fields.tx_rate(opt_int(data, "min_tx_rate"), "min_tx_rate")
    max_tx_rate = fields.tx_rate(opt_int(data, "max_tx_rate"), "max_tx_rate")

    prio = fields.rule_priority(data)
    # ``enableRdma`` is Spiderpool's older spelling of ``rdmaIsolation``.
    rdma = flag(data, "rdmaIsolation", False) or flag(data, "enableRdma", False)
    return NetConf(
        base=base,
        device_id=device_id,
        vlan=vlan,
        vlan_qos=qos,
        vlan_proto=proto,
        mac=_validate_mac(mac),
        spoofchk=_on_off(opt_str(data, "spoofchk")),
        trust=_on_off(opt_str(data, "trust")),
        link_state=link_state,
        min_tx_rate=min_tx_rate,
        max_tx_rate=max_tx_rate,
        mtu=mtu,
        detect_ip_conflict=flag(data, "detectIPConflict", True),
        detect_gateway=flag(data, "detectGateway", True),
        pod_default_route_nic=opt_str(data, "podDefaultRouteNIC") or "",
        rdma_isolation=rdma,
        policy_routing=flag(data, "policyRouting", True),
        route_table=fields.route_table(data),
        rule_priority=prio,
    )


def load_conf(args: CmdArgs) -> NetConf:
    """The command's netconf, validated; only ADD requires a ``deviceID``."""
    return parse_conf(args.netconf, args.cni_args, require_device=args.command == "ADD")
