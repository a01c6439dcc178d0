# SPDX-License-Identifier: Apache-2.0
"""railyard-ipam: a standard CNI IPAM plugin whose addresses come from ipamd.

For main plugins that delegate IPAM by exec (macvlan, host-device, ipvlan, and
our own plugins when ``ipam.type`` names this binary). Config: ``config.py``
(Spiderpool's IPAM keys) and README.md.

- ADD: allocate for (name, CNI_CONTAINERID, CNI_IFNAME) with the pod from
  CNI_ARGS, the node from RAILYARD_NODE_NAME (else the hostname) and the
  requested IPs (runtimeConfig.ips / args.cni.ips / CNI_ARGS IP); the result
  has ``ips`` (CIDR with the pool prefix, gateway) and the pools' ``routes``
  and no interfaces, as the spec wants from IPAM plugins.
- DEL: release. Like Spiderpool's ``command_delete.go``, a failure to reach
  ipamd is logged and DEL succeeds: a DEL that can never succeed blocks pod
  deletion forever, and GC reclaims whatever was not released.
- CHECK: ipamd must hold every address of prevResult for the attachment.
- STATUS: 50 when ipamd is down or not ready. GC: ipamd's GC for the network.

Standard library at module level; grpc comes with ``cni.ipam.grpc_client``,
imported lazily by the default client factory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from cni.deps import default_deps
from cni.errors import CHECK_FAILED, CniError
from cni.ipam import IpamClient, IpamError, IpamResult
from cni.plugins.binding import Commands, bind
from cni.plugins.ipam.config import IpamConf, ipam_request, load_conf
from cni.skel import CmdArgs, PluginFuncs
from cni.types import IPConfig, Result, Route, parse_cidr, parse_ip, parse_network

if TYPE_CHECKING:
    from cni.deps import DepsFactory

log = logging.getLogger(__name__)

ClientFactory = Callable[[Mapping[str, Any], Mapping[str, str]], IpamClient]


def _real_client(netconf: Mapping[str, Any], env: Mapping[str, str]) -> IpamClient:
    from cni import deadline
    from cni.ipam.grpc_client import IpamdClient

    return IpamdClient.from_netconf(netconf, env, budget=deadline.remaining)


def to_result(res: IpamResult, cni_version: str) -> Result:
    """ipamd's addresses and routes as a CNI Result (no interfaces)."""
    return Result(
        cni_version=cni_version,
        ips=[
            IPConfig(
                address=parse_cidr(a.address),
                gateway=parse_ip(a.gateway) if a.gateway else None,
            )
            for a in res.ips
        ],
        routes=[
            Route(dst=parse_network(r.dst), gw=parse_ip(r.gw) if r.gw else None)
            for r in res.routes
        ],
    )


def add(args: CmdArgs, conf: IpamConf, deps: None, ipam: IpamClient) -> Result:
    res = ipam.allocate(ipam_request(args, conf))
    log.info(
        "allocated %s for container %s ifname %s",
        ", ".join(a.address for a in res.ips),
        args.container_id,
        args.ifname,
    )
    return to_result(res, args.cni_version)


def delete(args: CmdArgs, conf: IpamConf, deps: None, ipam: IpamClient) -> None:
    try:
        ipam.release(conf.name, args.container_id, args.ifname)
    except IpamError as err:
        # See the module docstring: GC will reclaim it.
        log.error(
            "release of container %s ifname %s failed, left to GC: %s %s",
            args.container_id,
            args.ifname,
            err.msg,
            err.details,
        )


def check(args: CmdArgs, conf: IpamConf, deps: None, ipam: IpamClient) -> None:
    held = ipam.check(conf.name, args.container_id, args.ifname)
    prev = conf.base.prev_result
    if prev is None:
        return
    have = {a.address for a in held.ips}
    for ip in prev.ips:
        if str(ip.address) not in have:
            raise CniError(
                CHECK_FAILED,
                "IPAM check failed",
                f"{ip.address} of prevResult is not held by ipamd for container "
                f"{args.container_id} ifname {args.ifname} (held: "
                f"{sorted(have) or 'nothing'})",
            )


def status(args: CmdArgs, conf: IpamConf, deps: None, ipam: IpamClient) -> None:
    ipam.status()


def gc(args: CmdArgs, conf: IpamConf, deps: None, ipam: IpamClient) -> None:
    # One call: ipamd releases what it can and fails the call otherwise, which
    # is the GC policy of every plugin (cni.plugins.binding).
    count = ipam.gc(conf.name, args.valid_attachments)
    log.info("GC released %d attachment(s) of network %s", count, conf.name)


COMMANDS = Commands(
    load_conf=load_conf,
    add=add,
    delete=delete,
    check=check,
    status=status,
    gc=gc,
    deps_in=(),  # an IPAM plugin touches no kernel object
)


def plugin_funcs(
    make_deps: DepsFactory | None = None, make_ipam: ClientFactory | None = None
) -> PluginFuncs:
    """The five commands over this IPAM client factory (None: ipamd's client).

    An IPAM plugin touches no kernel object: ``make_deps`` is accepted for the
    common shape and never called.
    """
    return bind(COMMANDS, make_deps or default_deps, make_ipam or _real_client)
