# SPDX-License-Identifier: Apache-2.0
"""The rdma netconf (k8snetworkplumbingwg/rdma-cni compatible), validated cheaply.

Imports only the standard library and the pure ``cni.{args,errors,types}``: a
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

from cni.args import runtime_device_id
from cni.errors import INVALID_CONFIG, CniError
from cni.types import NetConf as BaseNetConf
from cni.types import is_pci_address

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
    """Parse and validate; CniError 7 names the offending key."""
    base = BaseNetConf.from_dict(netconf)
    raw = netconf.get("deviceID", "")
    if raw is None:
        raw = ""
    if not isinstance(raw, str):
        raise CniError(
            INVALID_CONFIG,
            "invalid network config",
            f"'deviceID' must be a string, got {raw!r}",
        )
    device_id = raw or runtime_device_id(netconf)
    if device_id and not is_pci_address(device_id):
        raise CniError(
            INVALID_CONFIG,
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
