# SPDX-License-Identifier: Apache-2.0
"""railyard-ipam: a standard CNI IPAM plugin whose addresses come from ipamd.

For main plugins that delegate IPAM by exec (macvlan, host-device, ipvlan, and
our own plugins when ``ipam.type`` names this binary). Config, as Spiderpool's
IPAM plugin takes it (peers.md 4.2)::

    "ipam": {"type": "railyard-ipam",
             "default_ipv4_ippool": ["gpu1-net11"], "default_ipv6_ippool": [],
             "socket": "/run/railyard/ipamd.sock", "timeout": 30,
             "sticky": false}

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

from cni.args import requested_ips
from cni.attach.ipam_glue import attachment_request
from cni.errors import CHECK_FAILED, INVALID_CONFIG, CniError
from cni.ipam import IpamClient, IpamError, IpamRequest, IpamResult
from cni.skel import CmdArgs, PluginFuncs
from cni.types import IPConfig, Result, Route, parse_cidr, parse_ip, parse_network

if TYPE_CHECKING:
    from cni.deps import DepsFactory

log = logging.getLogger(__name__)

ClientFactory = Callable[[Mapping[str, Any], Mapping[str, str]], IpamClient]


def _real_client(netconf: Mapping[str, Any], env: Mapping[str, str]) -> IpamClient:
    from cni.ipam.grpc_client import IpamdClient

    return IpamdClient.from_netconf(netconf, env)


def _ipam_section(args: CmdArgs) -> Mapping[str, Any]:
    ipam = args.conf.ipam
    if not ipam:
        raise CniError(INVALID_CONFIG, "invalid network config", "missing 'ipam'")
    return ipam


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


def ipam_request(args: CmdArgs) -> IpamRequest:
    """The allocation request of an ADD (config checked before any I/O)."""
    ipam = _ipam_section(args)
    sticky = ipam.get("sticky", False)
    if not isinstance(sticky, bool):
        raise CniError(
            INVALID_CONFIG, "invalid network config", "'ipam.sticky' must be a boolean"
        )
    return attachment_request(
        args,
        args.conf.name,
        _pools(ipam, "default_ipv4_ippool"),
        _pools(ipam, "default_ipv6_ippool"),
        requested_ips(args.netconf, args.cni_args),
        sticky,
    )


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


class Commands:
    """The five commands over an injectable client factory (tests pass theirs)."""

    def __init__(self, client_factory: ClientFactory = _real_client) -> None:
        self._factory = client_factory

    def _client(self, args: CmdArgs) -> IpamClient:
        return self._factory(args.netconf, args.env)

    def add(self, args: CmdArgs) -> Result:
        req = ipam_request(args)
        client = self._client(args)
        try:
            res = client.allocate(req)
        finally:
            client.close()
        log.info(
            "allocated %s for container %s ifname %s",
            ", ".join(a.address for a in res.ips),
            args.container_id,
            args.ifname,
        )
        return to_result(res, args.cni_version)

    def delete(self, args: CmdArgs) -> None:
        _ipam_section(args)
        client = self._client(args)
        try:
            client.release(args.conf.name, args.container_id, args.ifname)
        except IpamError as err:
            # See the module docstring: GC will reclaim it.
            log.error(
                "release of container %s ifname %s failed, left to GC: %s %s",
                args.container_id,
                args.ifname,
                err.msg,
                err.details,
            )
        finally:
            client.close()

    def check(self, args: CmdArgs) -> None:
        _ipam_section(args)
        client = self._client(args)
        try:
            held = client.check(args.conf.name, args.container_id, args.ifname)
        finally:
            client.close()
        prev = args.conf.prev_result
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

    def status(self, args: CmdArgs) -> None:
        client = self._client(args)
        try:
            client.status()
        finally:
            client.close()

    def gc(self, args: CmdArgs) -> None:
        _ipam_section(args)
        client = self._client(args)
        try:
            count = client.gc(args.conf.name, args.valid_attachments)
        finally:
            client.close()
        log.info("GC released %d attachment(s) of network %s", count, args.conf.name)


def plugin_funcs(
    make_deps: DepsFactory | None = None, make_ipam: ClientFactory | None = None
) -> PluginFuncs:
    """The five commands over this IPAM client factory (None: ipamd's client).

    An IPAM plugin touches no kernel object: ``make_deps`` is accepted for the
    common shape and never called.
    """
    cmds = Commands(make_ipam or _real_client)
    return PluginFuncs(
        add=cmds.add,
        del_=cmds.delete,
        check=cmds.check,
        status=cmds.status,
        gc=cmds.gc,
    )
