# SPDX-License-Identifier: Apache-2.0
"""The IPAM request an ADD sends and the result it prints (sriov and ib-sriov).

Standard library, ``cni.args``, ``cni.ipam``, ``cni.types`` and
``cni.attach.attach``'s ``Attached`` only. Both plugins' netconf classes
satisfy ``IpamConf``; nothing here knows which plugin it serves. The
railyard-ipam plugin builds its request with ``attachment_request`` too, so
every binary names the pod and the node the same way.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from cni.errors import INVALID_CONFIG, CniError
from cni.ipam import IpamRequest
from cni.types import DNS, Interface, IPConfig, Result, Route

if TYPE_CHECKING:
    from cni.attach.attach import Attached
    from cni.skel import CmdArgs

NODE_NAME_ENV = "RAILYARD_NODE_NAME"


class IpamConf(Protocol):
    """What the glue reads from a plugin's parsed netconf."""

    @property
    def name(self) -> str: ...

    @property
    def ipam(self) -> dict[str, Any]: ...

    @property
    def ipam_type(self) -> str: ...

    @property
    def raw(self) -> dict[str, Any]: ...


def _pools(ipam: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """A pool name or a list of them (code 7 for anything else: a number
    here reached ``tuple()`` and failed with 999)."""
    value = ipam.get(key) or []
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        shown = repr(value)
        raise CniError(
            INVALID_CONFIG,
            "invalid network config",
            f"ipam.{key} must be a pool name or a list of pool names, got "
            f"{shown if len(shown) <= 80 else shown[:77] + '...'}",
        )
    return tuple(value)


def _sticky(ipam: Mapping[str, Any]) -> bool:
    # Only a JSON true counts: "sticky": "false" must not pin an address.
    return ipam.get("sticky") is True


def ipam_request(args: CmdArgs, conf: IpamConf) -> IpamRequest | None:
    """The allocation request of an ADD; None when the netconf has no ipam."""
    if not conf.ipam_type:
        return None
    from cni.args import requested_ips

    return attachment_request(
        args,
        conf.name,
        _pools(conf.ipam, "default_ipv4_ippool"),
        _pools(conf.ipam, "default_ipv6_ippool"),
        requested_ips(conf.raw, args.cni_args),
        _sticky(conf.ipam),
    )


def attachment_request(
    args: CmdArgs,
    network: str,
    ipv4_pools: tuple[str, ...],
    ipv6_pools: tuple[str, ...],
    requested: tuple[str, ...],
    sticky: bool,
) -> IpamRequest:
    """An allocation request for the attachment of ``args``: the pod as CNI_ARGS
    names it, the node as RAILYARD_NODE_NAME (else the hostname) does."""
    cni_args = args.cni_args
    return IpamRequest(
        network=network,
        container_id=args.container_id,
        ifname=args.ifname,
        netns=args.netns,
        pod_namespace=cni_args.k8s_pod_namespace,
        pod_name=cni_args.k8s_pod_name,
        pod_uid=cni_args.k8s_pod_uid,
        node_name=args.env.get(NODE_NAME_ENV) or socket.gethostname(),
        ipv4_pools=ipv4_pools,
        ipv6_pools=ipv6_pools,
        requested_ips=requested,
        sticky=sticky,
    )


def to_result(att: Attached, cni_version: str) -> Result:
    """The ADD result: the pod interface, its addresses and the IPAM routes."""
    iface = Interface(
        name=att.ifname, mac=att.mac, mtu=att.mtu, sandbox=att.sandbox, pci_id=att.pci
    )
    ips = [
        IPConfig(
            address=ipaddress.ip_interface(ip.address),
            gateway=ipaddress.ip_address(ip.gateway) if ip.gateway else None,
            interface=0,
        )
        for ip in att.ips
    ]
    routes = [
        Route(
            dst=ipaddress.ip_network(r.dst, strict=False),
            gw=ipaddress.ip_address(r.gw) if r.gw else None,
        )
        for r in att.routes
    ]
    return Result(
        cni_version=cni_version,
        interfaces=[iface],
        ips=ips,
        routes=routes,
        dns=DNS.from_json(att.dns or None),
    )
