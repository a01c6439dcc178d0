# SPDX-License-Identifier: Apache-2.0
"""The railyard-ipam netconf: the ``ipam`` section Spiderpool's IPAM plugin takes.

    "ipam": {"type": "railyard-ipam",
             "default_ipv4_ippool": ["gpu1-net11"], "default_ipv6_ippool": [],
             "socket": "/run/railyard/ipamd.sock", "timeout": 30,
             "sticky": false}

``socket``/``timeout`` and the TLS keys are read by the ipamd client
(``cni.ipam.grpc_client.IpamdClient.from_netconf``); this module checks what
the commands use, before any I/O. Standard library and cni's light modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cni.args import requested_ips
from cni.attach.ipam_glue import attachment_request
from cni.errors import INVALID_CONFIG, CniError
from cni.ipam import IpamRequest
from cni.netconf_fields import flag
from cni.skel import CmdArgs
from cni.types import NetConf as BaseNetConf


@dataclass(frozen=True, slots=True)
class IpamConf:
    """A validated railyard-ipam netconf."""

    base: BaseNetConf
    ipv4_pools: tuple[str, ...] = ()
    ipv6_pools: tuple[str, ...] = ()
    sticky: bool = False

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def cni_version(self) -> str:
        return self.base.cni_version


def _pools(ipam: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = ipam.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise CniError(
        INVALID_CONFIG,
        "invalid network config",
        f"'ipam.{key}' must be a list of pool names, got {value!r}",
    )


def load_conf(args: CmdArgs) -> IpamConf:
    """The command's netconf; every command but STATUS needs an ``ipam`` section."""
    base = args.conf
    ipam = base.ipam
    if not ipam:
        if args.command == "STATUS":
            return IpamConf(base=base)
        raise CniError(INVALID_CONFIG, "invalid network config", "missing 'ipam'")
    sticky = flag(ipam, "sticky", False, "ipam")
    return IpamConf(
        base=base,
        ipv4_pools=_pools(ipam, "default_ipv4_ippool"),
        ipv6_pools=_pools(ipam, "default_ipv6_ippool"),
        sticky=sticky,
    )


def ipam_request(args: CmdArgs, conf: IpamConf) -> IpamRequest:
    """The allocation request of an ADD."""
    return attachment_request(
        args,
        conf.name,
        conf.ipv4_pools,
        conf.ipv6_pools,
        requested_ips(args.netconf, args.cni_args),
        conf.sticky,
    )
