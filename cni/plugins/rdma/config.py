# SPDX-License-Identifier: Apache-2.0
"""The rdma netconf (k8snetworkplumbingwg/rdma-cni compatible), validated cheaply.

Imports only the standard library and the pure
``cni.{errors,netconf_fields,types}``: a
config error must be reported without loading pyroute2.

Keys: ``cniVersion``, ``name``, ``type: "rdma"``, ``deviceID``
(injected at top level by Multus; ``runtimeConfig.deviceID`` is accepted too),
``args.cni.debug`` (accepted, ignored: ``logLevel`` is our switch). Unknown
keys are ignored, as Go's json.Unmarshal does. rdma-cni also takes auxiliary
(SF) device names as deviceID; Railyard only handles PCI functions and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cni.errors import INVALID_CONFIG, CniError
from cni.netconf_fields import (
    config_error,
    is_pci_address,
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
    return RdmaConf(base=base, device_id=device_id.lower())


def load_conf(args: CmdArgs) -> RdmaConf:
    """The command's netconf, validated; ADD must carry a ``prevResult``."""
    conf = parse_conf(args.netconf)
    if args.command == "ADD" and conf.base.prev_result is None:
        raise CniError(
            INVALID_CONFIG,
            "RDMA-CNI is expected to be called as part of a plugin chain",
            "no prevResult in the network config",
        )
    return conf
