# SPDX-License-Identifier: Apache-2.0
"""The rdma netconf (k8snetworkplumbingwg/rdma-cni compatible), validated cheaply.

Imports only the standard library and the pure
``cni.{errors,netconf_fields,types}``: a
config error must be reported without loading pyroute2.

Keys: ``cniVersion``, ``name``, ``type: "rdma"``, ``deviceID``
(injected at top level by Multus; ``runtimeConfig.deviceID`` is accepted too),
``args.cni.debug`` (accepted, ignored: ``logLevel`` is our switch). Unknown
keys are ignored, as Go's json.Unmarshal does.

Railyard's own keys (rdma-cni has neither):

- ``rdmaDevName``: the RDMA device's name in the pod, a template with
  ``{ifname}`` (CNI_IFNAME) and ``{rail}`` (the number CNI_IFNAME ends in:
  ``net3`` -> 3), e.g. ``"rail{rail}"``. Expanded and checked against the
  kernel's rules (``cni.kernel.rdma_rules``) before any change.
- ``roceTos``: the TOS byte (0-255, DSCP in the upper six bits) of the
  device's RoCE traffic; refused on an InfiniBand port. rdma-cni also takes auxiliary
(SF) device names as deviceID; Railyard only handles PCI functions and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cni.errors import INVALID_CONFIG, CniError
from cni.kernel import InvalidArgument
from cni.kernel.rdma_rules import check_device_name, check_roce_tos
from cni.netconf_fields import (
    config_error,
    is_pci_address,
    opt_int,
    opt_str,
    runtime_device_id,
)
from cni.types import NetConf as BaseNetConf

if TYPE_CHECKING:
    from cni.skel import CmdArgs


@dataclass(frozen=True, slots=True)
class RdmaConf:
    base: BaseNetConf
    device_id: str  # "" when neither deviceID nor runtimeConfig.deviceID is set
    dev_name_template: str = ""  # rdmaDevName; "" keeps the kernel's name
    roce_tos: int | None = None  # roceTos; None leaves the TOS alone
    dev_name: str = ""  # the template expanded for this command's ifname

    @property
    def cni_version(self) -> str:
        return self.base.cni_version


def parse_conf(netconf: dict[str, Any]) -> RdmaConf:
    """Parse and validate; CniError 6 or 7 names the offending key."""
    base = BaseNetConf.from_dict(netconf)
    device_id = opt_str(netconf, "deviceID") or runtime_device_id(netconf)
    if device_id and not is_pci_address(device_id):
        raise config_error(
            f"deviceID {device_id} is not a PCI address",
            "expected DDDD:BB:DD.F (e.g. 0000:af:00.2); auxiliary (SF) devices are "
            "not supported",
        )
    template = opt_str(netconf, "rdmaDevName") or ""
    _check_fields(template)
    tos = opt_int(netconf, "roceTos")
    if tos is not None:
        try:
            check_roce_tos(tos)
        except InvalidArgument as exc:
            raise config_error("invalid roceTos", str(exc)) from exc
    return RdmaConf(
        base=base,
        device_id=device_id.lower(),
        dev_name_template=template,
        roce_tos=tos,
    )


_FIELD = re.compile(r"\{([^{}]*)\}")
_TEMPLATE_FIELDS = ("ifname", "rail")
_RAIL = re.compile(r"(\d+)$")


def _check_fields(template: str) -> None:
    for name in _FIELD.findall(template):
        if name not in _TEMPLATE_FIELDS:
            raise config_error(
                f"rdmaDevName {template!r}: unknown field {{{name}}}",
                "use {ifname} (CNI_IFNAME) or {rail} (the number it ends in)",
            )


def expand_dev_name(template: str, ifname: str) -> str:
    """``template`` for this interface, checked as the kernel will; CniError 7."""
    rail = _RAIL.search(ifname)
    if "{rail}" in template and rail is None:
        raise config_error(
            f"rdmaDevName {template!r} needs a rail number, but CNI_IFNAME "
            f"{ifname!r} ends in none"
        )
    name = template.replace("{ifname}", ifname)
    if rail is not None:
        name = name.replace("{rail}", str(int(rail.group(1))))
    try:
        return check_device_name(name)
    except InvalidArgument as exc:
        raise config_error(
            f"rdmaDevName {template!r} gives no valid name", str(exc)
        ) from exc


def load_conf(args: CmdArgs) -> RdmaConf:
    """The command's netconf, validated; ADD must carry a ``prevResult``."""
    conf = parse_conf(args.netconf)
    if args.command == "ADD" and conf.base.prev_result is None:
        raise CniError(
            INVALID_CONFIG,
            "RDMA-CNI is expected to be called as part of a plugin chain",
            "no prevResult in the network config",
        )
    if args.command == "ADD" and conf.dev_name_template:
        conf = replace(
            conf, dev_name=expand_dev_name(conf.dev_name_template, args.ifname)
        )
    return conf
