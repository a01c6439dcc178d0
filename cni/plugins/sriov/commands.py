# SPDX-License-Identifier: Apache-2.0
"""The sriov plugin's commands: parse and validate first, then build the deps.

``cmd_*(args)`` is what ``cni.skel`` calls: it validates the netconf (a config
error costs no pyroute2/grpc import), then builds the real dependencies and the
IPAM client (``cni.attach.commands.resources``) unless a test passed its own
``Deps`` and IPAM factory, and runs the shared lifecycle (``cni.attach``).

Module-level imports: standard library and cni's light modules only.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from cni.attach.commands import (
    IpamFactory,
    check_vf,
    del_ipam_netconf,
    ipam_status,
    prev_attachment,
    raise_gc_errors,
    record_ipams,
    resources,
)
from cni.attach.commands import attach_spec as attach_spec_for
from cni.attach.device import ETHERNET
from cni.attach.ipam_glue import to_result
from cni.attach.lifecycle import AttachSpec, DetachRequest, attach, detach, gc
from cni.attach.pf import PfSettings
from cni.ipam import IpamClient
from cni.plugins.sriov.config import NetConf, load_conf
from cni.skel import CmdArgs, PluginFuncs
from cni.types import Result

if TYPE_CHECKING:
    from cni.deps import Deps

log = logging.getLogger(__name__)

PLUGIN = "sriov"


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
    spec = attach_spec_for(PLUGIN, args, nc, pf, mac=nc.mac or None)
    asked = [
        name
        for name, value in (
            ("mac", pf.mac),
            ("vlan", pf.vlan),
            ("spoofchk", pf.spoofchk),
            ("trust", pf.trust),
            ("min_tx_rate/max_tx_rate", pf.min_tx_rate or pf.max_tx_rate or None),
        )
        if value is not None
    ]
    if not asked:
        return spec  # nothing an IPoIB VF cannot take
    return replace(
        spec,
        link_kind=ETHERNET,
        link_kind_reason=f"{', '.join(asked)} can only be set on an Ethernet VF",
    )


def add(args: CmdArgs, nc: NetConf, deps: Deps, ipam: IpamClient | None) -> Result:
    att = attach(deps, attach_spec(args, nc), ipam)
    return to_result(att, nc.cni_version)


def cmd_add(
    args: CmdArgs, deps: Deps | None = None, ipam_factory: IpamFactory | None = None
) -> Result:
    nc = load_conf(args.netconf, args.cni_args)
    with resources(args, deps, ipam_factory) as (d, ipam):
        return add(args, nc, d, ipam)


# --------------------------------------------------------------------- DEL


def cmd_del(
    args: CmdArgs, deps: Deps | None = None, ipam_factory: IpamFactory | None = None
) -> None:
    nc = load_conf(args.netconf, args.cni_args, require_device=False)
    req = DetachRequest(PLUGIN, nc.name, args.container_id, args.ifname, args.netns)
    pick = del_ipam_netconf(PLUGIN, args)
    with resources(args, deps, ipam_factory, ipam_netconf=pick) as (d, ipam):
        detach(d, req, ipam)


# ------------------------------------------------------------------- CHECK


def cmd_check(
    args: CmdArgs, deps: Deps | None = None, ipam_factory: IpamFactory | None = None
) -> None:
    nc = load_conf(args.netconf, args.cni_args, require_device=False)
    prev = prev_attachment(nc.base.prev_result, args.ifname)
    with resources(args, deps, ipam_factory) as (d, ipam):
        check_vf(d, ipam, PLUGIN, nc.name, args, prev)


# ------------------------------------------------------------- STATUS, GC


def cmd_status(
    args: CmdArgs, deps: Deps | None = None, ipam_factory: IpamFactory | None = None
) -> None:
    """STATUS: 50 when ipamd (or the delegated IPAM's STATUS) says unavailable."""
    load_conf(args.netconf, args.cni_args, require_device=False)
    ipam_status(args, ipam_factory)


def cmd_gc(
    args: CmdArgs, deps: Deps | None = None, ipam_factory: IpamFactory | None = None
) -> None:
    nc = load_conf(args.netconf, args.cni_args, require_device=False)
    with (
        resources(args, deps, ipam_factory) as (d, ipam),
        record_ipams(args, ipam_factory, ipam) as ipam_for,
    ):
        errors = gc(d, PLUGIN, nc.name, args.valid_attachments, ipam, ipam_for)
    raise_gc_errors(errors)


FUNCS = PluginFuncs(
    add=cmd_add, del_=cmd_del, check=cmd_check, status=cmd_status, gc=cmd_gc
)
