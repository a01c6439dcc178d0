# SPDX-License-Identifier: Apache-2.0
"""The sriov plugin's commands: ``add/delete/check/status/gc(args, conf, deps, ipam)``.

``plugin_funcs(make_deps, make_ipam)`` binds them (``cni.plugins.binding``):
the netconf is validated by ``config.load_conf`` first (a config error costs
no pyroute2/grpc import), then the deps and the IPAM client are built, and the
shared VF lifecycle (``cni.attach``) runs.

Module-level imports: standard library and cni's light modules only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from cni.attach.attach import AttachSpec, attach
from cni.attach.commands import (
    IpamFactory,
    check_vf,
    del_ipam_netconf,
    ipam_status,
    prev_attachment,
    real_ipam,
    record_ipams,
)
from cni.attach.commands import attach_spec as attach_spec_for
from cni.attach.detach import DetachRequest, detach
from cni.attach.device import ETHERNET
from cni.attach.gc import gc as gc_vfs
from cni.attach.ipam_glue import to_result
from cni.deps import default_deps
from cni.ipam import IpamClient
from cni.plugins.binding import ADD, CHECK, DEL, GC, Commands, bind, gc_failed
from cni.plugins.sriov.config import NetConf, load_conf
from cni.record.vf import PfSettings
from cni.skel import CmdArgs, PluginFuncs
from cni.types import Result

if TYPE_CHECKING:
    from cni.deps import Deps, DepsFactory

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


# --------------------------------------------------------------------- DEL


def delete(args: CmdArgs, nc: NetConf, deps: Deps, ipam: IpamClient | None) -> None:
    req = DetachRequest(PLUGIN, nc.name, args.container_id, args.ifname, args.netns)
    detach(deps, req, ipam)


# ------------------------------------------------------------------- CHECK


def check(args: CmdArgs, nc: NetConf, deps: Deps, ipam: IpamClient | None) -> None:
    prev = prev_attachment(nc.base.prev_result, args.ifname)
    check_vf(deps, ipam, PLUGIN, nc.name, args, prev)


# ------------------------------------------------------------- STATUS, GC


def status(args: CmdArgs, nc: NetConf, deps: None, ipam: IpamClient | None) -> None:
    """STATUS: 50 when ipamd (or the delegated IPAM's STATUS) says unavailable."""
    ipam_status(ipam)


def gc(args: CmdArgs, nc: NetConf, deps: Deps, ipam: IpamClient | None) -> None:
    """GC: each stale record released through the IPAM that allocated it."""
    gc_through(real_ipam)(args, nc, deps, ipam)


def gc_through(
    make_ipam: IpamFactory,
) -> Callable[[CmdArgs, NetConf, Deps, IpamClient | None], None]:
    """GC whose records are released through the IPAM that allocated each
    (``teardown.ipam_netconf``), built with ``make_ipam`` when it is not the
    netconf's."""

    def run(args: CmdArgs, nc: NetConf, deps: Deps, ipam: IpamClient | None) -> None:
        with record_ipams(args, make_ipam, ipam) as ipam_for:
            errors = gc_vfs(
                deps, PLUGIN, nc.name, args.valid_attachments, ipam, ipam_for
            )
        gc_failed(errors)

    return run


COMMANDS = Commands(
    load_conf=load_conf,
    add=add,
    delete=delete,
    check=check,
    status=status,
    gc=gc,
    # STATUS asks IPAM only: no kernel handle, no pyroute2 import.
    deps_in={ADD, DEL, CHECK, GC},
    del_ipam_netconf=del_ipam_netconf(PLUGIN),
)


def plugin_funcs(
    make_deps: DepsFactory | None = None, make_ipam: IpamFactory | None = None
) -> PluginFuncs:
    """The five commands over these factories (None: the production ones)."""
    make_ipam = make_ipam or real_ipam
    # GC builds one IPAM client per allocating IPAM, from the same factory.
    commands = replace(COMMANDS, gc=gc_through(make_ipam))
    return bind(commands, make_deps or default_deps, make_ipam)
