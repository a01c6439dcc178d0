# SPDX-License-Identifier: Apache-2.0
"""The sriov plugin's commands: parse and validate first, then build the deps.

``cmd_*(args)`` is what ``cni.skel`` calls: it validates the netconf (a config
error costs no pyroute2/grpc import), then builds the real dependencies
(``cni.deps.real_deps``) and the IPAM client (``cni.ipam.choose``) and hands
them to ``add``/``delete``/... which tests call with their own ``Deps``.

Module-level imports: standard library and cni's light modules only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cni.attach.detection import DetectionPolicy
from cni.attach.ipam_glue import ipam_request, to_result
from cni.attach.lifecycle import (
    AttachSpec,
    DetachRequest,
    RoutingPolicy,
    attach,
    check,
    detach,
    gc,
)
from cni.attach.pf import PfSettings
from cni.errors import CHECK_FAILED, DEVICE_ERROR, CniError
from cni.ipam import IpamClient
from cni.plugins.sriov.config import NetConf, load_conf
from cni.skel import CmdArgs, PluginFuncs
from cni.types import Result

if TYPE_CHECKING:
    from cni.deps import Deps

log = logging.getLogger(__name__)

PLUGIN = "sriov"

IpamFactory = Callable[[Mapping[str, Any], Mapping[str, str]], "IpamClient | None"]


def _real_ipam(netconf: Mapping[str, Any], env: Mapping[str, str]) -> IpamClient | None:
    from cni.ipam.choose import choose_ipam

    return choose_ipam(netconf, env)


@contextmanager
def _resources(
    args: CmdArgs, deps: Deps | None, ipam_factory: IpamFactory | None
) -> Iterator[tuple[Deps, IpamClient | None]]:
    if deps is None:
        from cni.deps import real_deps

        deps = real_deps(args.env)
    ipam = (ipam_factory or _real_ipam)(args.netconf, args.env)
    try:
        yield deps, ipam
    finally:
        if ipam is not None:
            ipam.close()
        deps.close()


# --------------------------------------------------------------------- ADD


def attach_spec(args: CmdArgs, nc: NetConf) -> AttachSpec:
    """The netconf and env of an ADD as the shared VF lifecycle wants them."""
    pf = PfSettings(
        mac=nc.mac or None,
        vlan=nc.vlan,
        qos=nc.vlan_qos or 0,
        vlan_proto=nc.vlan_proto_number,
        spoofchk=nc.spoofchk,
        trust=nc.trust,
        link_state=nc.link_state,
        min_tx_rate=nc.min_tx_rate,
        max_tx_rate=nc.max_tx_rate,
    )
    return AttachSpec(
        plugin=PLUGIN,
        network=nc.name,
        container_id=args.container_id,
        ifname=args.ifname,
        netns=args.netns,
        pci=nc.device_id,
        pf_settings=pf,
        mac=nc.mac or None,
        mtu=nc.mtu,
        ipam_request=ipam_request(args, nc),
        ipam_type=nc.ipam_type,
        ipam_conf=dict(nc.ipam),
        detection=DetectionPolicy(
            conflict=nc.detect_ip_conflict, gateway=nc.detect_gateway
        ),
        routing=RoutingPolicy(
            enabled=nc.policy_routing,
            table=nc.route_table,
            priority=nc.rule_priority,
            default_route_nic=nc.pod_default_route_nic,
        ),
        rdma_isolation=nc.rdma_isolation,
    )


def add(args: CmdArgs, nc: NetConf, deps: Deps, ipam: IpamClient | None) -> Result:
    att = attach(deps, attach_spec(args, nc), ipam)
    return to_result(att, nc.cni_version)


def cmd_add(
    args: CmdArgs, deps: Deps | None = None, ipam_factory: IpamFactory | None = None
) -> Result:
    nc = load_conf(args.netconf, args.cni_args)
    with _resources(args, deps, ipam_factory) as (d, ipam):
        return add(args, nc, d, ipam)


# --------------------------------------------------------------------- DEL


def cmd_del(
    args: CmdArgs, deps: Deps | None = None, ipam_factory: IpamFactory | None = None
) -> None:
    nc = load_conf(args.netconf, args.cni_args, require_device=False)
    req = DetachRequest(PLUGIN, nc.name, args.container_id, args.ifname, args.netns)
    with _resources(args, deps, ipam_factory) as (d, ipam):
        detach(d, req, ipam)


# ------------------------------------------------------------------- CHECK


def cmd_check(
    args: CmdArgs, deps: Deps | None = None, ipam_factory: IpamFactory | None = None
) -> None:
    nc = load_conf(args.netconf, args.cni_args, require_device=False)
    prev = nc.base.prev_result
    if prev is None:
        raise CniError(CHECK_FAILED, "required prevResult missing")
    idx = next(
        (i for i, it in enumerate(prev.interfaces) if it.name == args.ifname), None
    )
    if idx is None:
        raise CniError(CHECK_FAILED, f"interface {args.ifname} not found in prevResult")
    ips = [str(ip.address) for ip in prev.ips if ip.interface in (idx, None)]
    with _resources(args, deps, ipam_factory) as (d, ipam):
        if ipam is not None:
            ipam.check(nc.name, args.container_id, args.ifname)
        check(
            d,
            PLUGIN,
            args.container_id,
            args.ifname,
            args.netns,
            ips,
            prev.interfaces[idx].mac,
        )


# ------------------------------------------------------------- STATUS, GC


def cmd_status(
    args: CmdArgs, deps: Deps | None = None, ipam_factory: IpamFactory | None = None
) -> None:
    """STATUS: 50 when ipamd (or the delegated IPAM's STATUS) says unavailable."""
    load_conf(args.netconf, args.cni_args, require_device=False)
    ipam = (ipam_factory or _real_ipam)(args.netconf, args.env)
    if ipam is None:
        return
    try:
        ipam.status()
    finally:
        ipam.close()


def cmd_gc(
    args: CmdArgs, deps: Deps | None = None, ipam_factory: IpamFactory | None = None
) -> None:
    nc = load_conf(args.netconf, args.cni_args, require_device=False)
    with _resources(args, deps, ipam_factory) as (d, ipam):
        errors = gc(d, PLUGIN, nc.name, args.valid_attachments, ipam)
    if errors:
        # SPEC.md "GC": go on past errors, report them at the end.
        raise CniError(DEVICE_ERROR, "GC incomplete", "; ".join(errors))


FUNCS = PluginFuncs(
    add=cmd_add, del_=cmd_del, check=cmd_check, status=cmd_status, gc=cmd_gc
)
