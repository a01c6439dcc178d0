# SPDX-License-Identifier: Apache-2.0
"""Command plumbing the sriov and ib-sriov plugins share around the lifecycle.

Standard library, ``cni.errors``, ``cni.types`` and ``cni.attach`` only; the
real dependencies (``cni.deps``) and IPAM client (``cni.ipam.choose``) are
imported inside the functions that build them, after the netconf was
validated, so a config error costs no pyroute2/grpc import.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from cni.attach.attach import AttachSpec, RoutingPolicy
from cni.attach.check import check
from cni.attach.detection import DetectionPolicy
from cni.attach.ipam_glue import IpamConf, ipam_request
from cni.attach.teardown import ipam_netconf
from cni.errors import CHECK_FAILED, CniError
from cni.ipam import IpamError, check_plugin_type
from cni.ipam.choose import IPAMD_TYPES
from cni.netconf_fields import detection_window
from cni.record.vf import PfSettings
from cni.types import Result

if TYPE_CHECKING:
    from cni.deps import Deps
    from cni.ipam import IpamClient
    from cni.record.vf import VfState
    from cni.skel import CmdArgs

#: Builds the IPAM client of a netconf (tests pass one returning a fake).
IpamFactory = Callable[[Mapping[str, Any], Mapping[str, str]], "IpamClient | None"]


class VfConf(IpamConf, Protocol):
    """What ``attach_spec`` reads from either plugin's netconf."""

    @property
    def device_id(self) -> str: ...
    @property
    def mtu(self) -> int | None: ...
    @property
    def rdma_isolation(self) -> bool: ...
    @property
    def detect_ip_conflict(self) -> bool: ...
    @property
    def detect_gateway(self) -> bool: ...
    @property
    def policy_routing(self) -> bool: ...
    @property
    def route_table(self) -> int | None: ...
    @property
    def rule_priority(self) -> int: ...
    @property
    def pod_default_route_nic(self) -> str: ...


def attach_spec(
    plugin: str,
    args: CmdArgs,
    conf: VfConf,
    pf_settings: PfSettings,
    mac: str | None = None,
) -> AttachSpec:
    """The netconf and env of an ADD as the shared VF lifecycle wants them.

    A delegated IPAM type that is not a bare plugin name is refused here,
    before the first change (code 7).
    """
    if conf.ipam_type and conf.ipam_type not in IPAMD_TYPES:
        try:
            check_plugin_type(conf.ipam_type)
        except IpamError as exc:
            raise CniError(exc.code, exc.msg, exc.details) from None
    return AttachSpec(
        plugin=plugin,
        network=conf.name,
        container_id=args.container_id,
        ifname=args.ifname,
        netns=args.netns,
        pci=conf.device_id,
        pf_settings=pf_settings,
        mac=mac,
        mtu=conf.mtu,
        ipam_request=ipam_request(args, conf),
        ipam_type=conf.ipam_type,
        ipam_conf=dict(conf.ipam),
        detection=DetectionPolicy(
            conflict=conf.detect_ip_conflict,
            gateway=conf.detect_gateway,
            window=detection_window(conf.raw),
        ),
        routing=RoutingPolicy(
            enabled=conf.policy_routing,
            table=conf.route_table,
            priority=conf.rule_priority,
            default_route_nic=conf.pod_default_route_nic,
        ),
        rdma_isolation=conf.rdma_isolation,
        pod_namespace=args.cni_args.k8s_pod_namespace,
        pod_name=args.cni_args.k8s_pod_name,
    )


def real_ipam(netconf: Mapping[str, Any], env: Mapping[str, str]) -> IpamClient | None:
    from cni import deadline
    from cni.ipam.choose import choose_ipam

    return choose_ipam(netconf, env, budget=deadline.remaining)


def ipam_status(ipam: IpamClient | None) -> None:
    """STATUS of the netconf's IPAM (50 when it says unavailable); none: fine."""
    if ipam is not None:
        ipam.status()


def prev_attachment(prev: Result | None, ifname: str) -> tuple[list[str], str]:
    """CHECK: the addresses and MAC prevResult gives ``ifname``."""
    if prev is None:
        raise CniError(CHECK_FAILED, "required prevResult missing")
    idx = next((i for i, it in enumerate(prev.interfaces) if it.name == ifname), None)
    if idx is None:
        raise CniError(CHECK_FAILED, f"interface {ifname} not found in prevResult")
    ips = [str(ip.address) for ip in prev.ips if ip.interface in (idx, None)]
    return ips, prev.interfaces[idx].mac


@contextmanager
def record_ipams(
    args: CmdArgs, ipam_factory: IpamFactory | None, shared: IpamClient | None
) -> Iterator[Callable[[VfState], IpamClient | None]]:
    """GC's IPAM per record: the one that allocated (``teardown.ipam_netconf``),
    ``shared`` (the netconf's) when that is the same; each built once, closed
    on exit."""
    made: dict[str, IpamClient | None] = {}

    def pick(st: VfState) -> IpamClient | None:
        netconf = ipam_netconf(args.netconf, st)
        if netconf.get("ipam") == args.netconf.get("ipam"):
            return shared
        key = json.dumps(netconf.get("ipam"), sort_keys=True, default=str)
        if key not in made:
            made[key] = (ipam_factory or real_ipam)(netconf, args.env)
        return made[key]

    try:
        yield pick
    finally:
        for client in made.values():
            if client is not None and client is not shared:
                client.close()


def del_ipam_netconf(plugin: str) -> Callable[[CmdArgs, Deps], dict[str, Any]]:
    """DEL's ``Commands.del_ipam_netconf``: the IPAM that allocated (the record's)."""

    def pick(args: CmdArgs, deps: Deps) -> dict[str, Any]:
        st = deps.records.vf(plugin).load(args.container_id, args.ifname)
        return ipam_netconf(args.netconf, st)

    return pick


def check_vf(
    deps: Deps,
    ipam: IpamClient | None,
    plugin: str,
    network: str,
    args: CmdArgs,
    prev: tuple[Sequence[str], str],
) -> None:
    """CHECK: IPAM still holds the attachment, and the VF is as ADD left it."""
    if ipam is not None:
        ipam.check(network, args.container_id, args.ifname)
    ips, mac = prev
    check(deps, plugin, args.container_id, args.ifname, args.netns, ips, mac)
