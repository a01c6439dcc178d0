# SPDX-License-Identifier: Apache-2.0
"""ADD of the VF lifecycle shared by sriov and ib-sriov: ``attach``.

Standard library, the contract modules and ``cni.attach.*`` only; every kernel,
sysfs and IPAM access goes through ``cni.deps.Deps`` and ``cni.ipam.IpamClient``.

Under the per-PCI lock:
 1. refuse a VF held by a live netns, restore one a dead pod left behind
    (``cni.attach.restore``); resolve the VF from sysfs;
 2. read the original state (netdev MAC/MTU/ifindex, the PF's VF entry), check
    the MTU against the PF's, and save the record *before the first change*;
 3. PF-side settings; plugin hooks (ib-sriov: GUID + rebind); RDMA device;
 4. netdev into the pod in one move, renamed there (one rtnetlink request);
    MAC, MTU, up; the IPAM's answer, asked for on a thread since the record
    was saved (``ipam_ahead``: it overlaps steps 3-4), or only now for an
    IPAM that may use the interface (a delegated dhcp);
 5. addresses; conflict + gateway detection; policy routing; announce.
Every step pushes its undo on one ``Rollback``; on any failure they run newest
first, the address is released and the record deleted - unless an undo itself
failed, in which case the record stays so DEL (or GC) can finish the job.
The record's ``stage`` (``cni.record.vf.Stage``) says what each save holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cni import timings
from cni.attach.allocation import Allocations
from cni.attach.detection import DetectionPolicy, announce, start_detection
from cni.attach.device import (
    VfDevice,
    host_netdevs,
    link_kind,
    require_link_kind,
    resolve_vf,
)
from cni.attach.ipam_ahead import AllocationAhead
from cni.attach.netdev import configure_in_pod, locate_host_netdev, move_into_pod
from cni.attach.pf import apply_pf_settings, read_vf
from cni.attach.restore import restore
from cni.attach.routing import (
    add_addresses,
    apply_routing,
    choose_table,
    host_prefix,
    keep_old_default_nic,
    plan_routing,
    require_default_route_nic,
    tune_rail_sysctls,
    with_cluster_routes,
)
from cni.errors import DEVICE_ERROR, INVALID_CONFIG, IPAM_ERROR, CniError
from cni.ipam import IpamAddress, IpamClient, IpamRequest, IpamRoute
from cni.kernel import LinkInfo
from cni.netconf_fields import DEFAULT_RULE_PRIORITY
from cni.record.store import VfRecords
from cni.record.vf import PfSettings, Stage, VfState
from cni.rollback import Rollback
from cni.state.locks import Locks

if TYPE_CHECKING:
    from cni.deps import Deps

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoutingPolicy:
    """Per-network policy routing options (sriov netconf keys in brackets)."""

    enabled: bool = True  # [policyRouting]
    table: int | None = None  # [routeTable]
    priority: int = DEFAULT_RULE_PRIORITY  # [rulePriority]
    default_route_nic: str = ""  # [podDefaultRouteNIC]
    rail_sysctls: bool = True  # [tuneRailSysctls]
    cluster_cidrs: tuple[str, ...] = ()  # [hijackCIDR]: via eth0 in every table


@dataclass(frozen=True, slots=True)
class AttachSpec:
    """Everything ``attach`` needs from the netconf and the CNI env."""

    plugin: str  # record namespace: "sriov", "ib-sriov"
    network: str
    container_id: str
    ifname: str
    netns: str
    pci: str
    pf_settings: PfSettings = field(default_factory=PfSettings)
    mac: str | None = None  # netdev MAC in the pod (sriov: same as the admin MAC)
    mtu: int | None = None
    ipam_request: IpamRequest | None = None  # None: the netconf has no ipam
    ipam_type: str = ""
    ipam_conf: dict[str, object] = field(default_factory=dict)
    detection: DetectionPolicy = field(default_factory=DetectionPolicy)
    routing: RoutingPolicy = field(default_factory=RoutingPolicy)
    rdma_isolation: bool = False
    pod_namespace: str = ""  # CNI_ARGS, recorded for the RDMA exporter
    pod_name: str = ""
    #: The kind of VF this plugin needs ("infiniband", "ethernet"; "" any) and
    #: why, for the refusal message (``cni.attach.device.require_link_kind``).
    link_kind: str = ""
    link_kind_reason: str = ""


@dataclass(slots=True)
class AttachContext:
    """Given to plugin hooks: they may change ``state``, and push undos on ``rb``."""

    deps: Deps
    spec: AttachSpec
    device: VfDevice
    state: VfState
    rb: Rollback
    store: VfRecords

    def save(self) -> None:
        self.store.save(self.state)


#: A hook runs after the PF settings and before the RDMA/netdev moves
#: (ib-sriov: set GUIDs, rebind, re-resolve ``state.host_ifname``).
Hook = Callable[[AttachContext], None]


@dataclass(slots=True)
class Attached:
    """What ADD reports: the pod interface and its addresses."""

    ifname: str
    mac: str
    mtu: int
    sandbox: str
    pci: str
    ips: list[IpamAddress] = field(default_factory=list)
    routes: list[IpamRoute] = field(default_factory=list)
    dns: dict[str, object] = field(default_factory=dict)
    state: VfState | None = None
    link_type: int = 1  # ARPHRD_*: 32 for IPoIB


def attach(
    deps: Deps,
    spec: AttachSpec,
    ipam: IpamClient | None,
    hooks: Sequence[Hook] = (),
) -> Attached:
    """ADD: attach the VF at ``spec.pci`` to the pod (see module doc)."""
    store = deps.records.vf(spec.plugin)
    allocations = Allocations(deps.state_dir)
    with Locks(deps.state_dir).lock(spec.pci):
        allocations.check(spec.pci, spec.netns, deps.netns)
        if spec.routing.enabled:
            require_default_route_nic(
                deps.links, spec.netns, spec.ifname, spec.routing.default_route_nic
            )
        _reclaim(deps, store, spec)
        dev = resolve_vf(deps.sysfs, spec.pci)
        host: LinkInfo | None = None
        if not dev.dpdk:
            assert dev.netdev is not None
            host = locate_host_netdev(deps.links, [dev.netdev], None, None, None)
            if host is None:
                raise CniError(
                    DEVICE_ERROR,
                    f"VF {spec.pci} netdev {dev.netdev} is not in the host",
                    "is another pod using it?",
                )
        orig_vf = read_vf(deps.vf, dev.pf, dev.vf_index)
        pf = deps.links.find(dev.pf)
        kind = link_kind(host, pf, orig_vf)
        require_link_kind(spec.plugin, dev, kind, spec.link_kind, spec.link_kind_reason)
        _check_mtu(dev, pf, spec.mtu)
        rdma_dev = None
        if spec.rdma_isolation:
            # Loaded only when asked. Checked before the first change, so a
            # host in shared mode or a VF without exactly one device is refused
            # with nothing to undo.
            from cni.attach import rdma

            rdma.require_exclusive(deps.rdma)
            rdma_dev = rdma.resolve_rdma_device(deps.sysfs, spec.pci)
        st = VfState(
            container_id=spec.container_id,
            ifname=spec.ifname,
            network=spec.network,
            netns=spec.netns,
            pci=spec.pci,
            pf=dev.pf,
            pod_namespace=spec.pod_namespace,
            pod_name=spec.pod_name,
            vf_index=dev.vf_index,
            dpdk=dev.dpdk,
            host_ifname=dev.netdev,
            host_ifindex=host.index if host else None,
            orig_mac=host.mac if host else None,
            orig_mtu=host.mtu if host else None,
            orig_vf=orig_vf,
            pf_settings=spec.pf_settings,
            ipam_type=spec.ipam_type,
            ipam_conf=dict(spec.ipam_conf),
            rdma_device=rdma_dev,
            stage=Stage.ORIGINALS_RECORDED,
        )
        place = deps.sysfs.place(spec.pci)
        if place is not None:
            st.pcie_root, st.numa_node = place.pcie_root, place.numa_node
        with Rollback(log) as rb:
            allocations.claim(spec.pci, spec.netns, deps.netns)
            # Pushed first so it runs last, and only if every other undo worked:
            # a record that outlives a failed rollback lets DEL or GC finish.
            rb.push(lambda: _forget(store, st, allocations, rb), "delete the record")
            store.save(st)
            ahead = None
            if spec.ipam_request is not None and ipam is not None:
                request = _with_master(deps, spec.ipam_request, dev.pf)
                ahead = AllocationAhead.start(ipam, request, rb)
            ctx = AttachContext(deps, spec, dev, st, rb, store)
            assert st.orig_vf is not None
            with timings.step(timings.PF_SETTINGS):
                apply_pf_settings(
                    deps.vf, dev.pf, dev.vf_index, spec.pf_settings, st.orig_vf, rb
                )
                for hook in hooks:  # ib-sriov's GUID and the rebind it needs
                    hook(ctx)
            if spec.rdma_isolation:
                if hooks:
                    # Resolved again: a hook's driver rebind (ib-sriov's GUID)
                    # recreates the RDMA device, and the kernel may number it
                    # anew (mlx5_N). Recorded before it moves.
                    st.rdma_device = rdma.resolve_rdma_device(deps.sysfs, spec.pci)
                    store.save(st)
                assert st.rdma_device is not None
                # Before the netdev: on IPoIB the kernel recreates the netdev in
                # the host when its RDMA device changes netns (ib-sriov-cni).
                rdma.move_rdma_in(deps.rdma, st.rdma_device, spec.netns, rb)
                st.host_ifname = _current_netdev(deps, st)
            result = _attach_netdev(deps, spec, st, rb, store)
            if ahead is None:
                store.save(st)  # no IPAM write to carry the pod-side state
            else:
                _attach_ip(deps, spec, st, rb, store, ahead, result)
            rb.commit()
    log.info(
        "attached VF %s (%s) as %s in %s: %s, table %s",
        st.pci,
        st.host_ifname,
        st.ifname,
        st.netns,
        ", ".join(st.addresses) or "no addresses",
        st.table,
    )
    result.state = st
    return result


def _with_master(deps: Deps, request: IpamRequest, pf: str) -> IpamRequest:
    """``request`` with the PF's host addresses when it matches the master's
    subnet (Spiderpool's matchMasterSubnet): the PF is the VF's master, and
    its address on this node tells ipamd which per-node pool is this rail's."""
    if not request.match_master_subnet:
        return request
    return replace(request, master=pf, master_addresses=tuple(deps.links.addresses(pf)))


def _reclaim(deps: Deps, store: VfRecords, spec: AttachSpec) -> None:
    """Finish the restore of an earlier attachment of this VF whose pod is gone.

    A DEL with an empty CNI_NETNS (or a failed one) leaves its record while
    the VF is out of reach; once that netns is gone the VF is back in the host
    under the pod's name (sriov-cni #126). Taking it as found would record the
    pod's MAC and MTU as "original", so restore it from the old record first.
    The old address is left to DEL/GC: it may belong to another network.
    """
    for old in store.all():
        if old.pci != spec.pci or (old.container_id, old.ifname) == (
            spec.container_id,
            spec.ifname,
        ):
            continue
        if old.stage.vf_home:
            continue  # restored already; only its address or record is left
        if old.netns and deps.netns.exists(old.netns):
            continue  # allocations.check refused a live holder already
        failures, pending = restore(deps, old, "")
        if failures or pending:
            raise CniError(
                DEVICE_ERROR,
                f"VF {spec.pci} is still being released by {old.container_id}",
                "; ".join(failures) or "its netdev is not back in the host yet",
            )
        log.info("restored VF %s left by %s/%s", old.pci, old.container_id, old.ifname)
        old.advance(Stage.VF_HOME)
        store.save(old)


def _current_netdev(deps: Deps, st: VfState) -> str | None:
    found = locate_host_netdev(
        deps.links, host_netdevs(deps.sysfs, st.pci), st.host_ifname, None, None
    )
    return found.name if found is not None else st.host_ifname


def _forget(
    store: VfRecords, st: VfState, allocations: Allocations, rb: Rollback
) -> None:
    if rb.failures:
        log.error("rollback incomplete; keeping the record of %s for DEL", st.pci)
        return
    store.delete(st.container_id, st.ifname)
    allocations.release(st.pci)


def _check_mtu(dev: VfDevice, pf: LinkInfo | None, mtu: int | None) -> None:
    if not mtu:
        return
    if pf is not None and mtu > pf.mtu:
        raise CniError(
            INVALID_CONFIG,
            f"mtu {mtu} is above the MTU of PF {dev.pf} ({pf.mtu})",
            "a VF cannot carry larger frames than its PF; lower the netconf's "
            "mtu or raise the PF's",
        )


def _attach_netdev(
    deps: Deps, spec: AttachSpec, st: VfState, rb: Rollback, store: VfRecords
) -> Attached:
    mac = spec.mac or spec.pf_settings.mac
    if st.dpdk:
        # sriov-cni GetMacAddressForResult: the PF's admin MAC unless all-zero.
        admin = mac or (st.orig_vf.mac if st.orig_vf else "")
        return Attached(
            spec.ifname,
            "" if admin == "00:00:00:00:00:00" else admin,
            0,
            spec.netns,
            spec.pci,
        )
    assert st.host_ifname is not None
    with timings.step(timings.MOVE):
        moved = move_into_pod(
            deps.links, deps.netns, st.host_ifname, spec.netns, spec.ifname, rb
        )
        info = configure_in_pod(
            deps.links, spec.ifname, spec.netns, mac, spec.mtu, moved, rb
        )
    # Saved with the next record write (after IPAM, or at the end): DEL can
    # also recognise the VF by its ifindex, which a netns move keeps.
    st.pod_mac, st.pod_mtu = info.mac, info.mtu
    st.advance(Stage.NETDEV_IN_POD)
    return Attached(
        spec.ifname, info.mac, info.mtu, spec.netns, spec.pci, link_type=info.link_type
    )


def _attach_ip(
    deps: Deps,
    spec: AttachSpec,
    st: VfState,
    rb: Rollback,
    store: VfRecords,
    ahead: AllocationAhead,
    out: Attached,
) -> None:
    res = ahead.result()
    if not res.ips:
        raise CniError(IPAM_ERROR, "IPAM plugin returned missing IP config")
    out.ips, out.routes, out.dns = list(res.ips), list(res.routes), dict(res.dns)
    st.addresses = [ip.address for ip in res.ips]
    st.advance(Stage.ADDRESSES_RECORDED)
    plan = None
    if spec.routing.enabled and not st.dpdk:
        used = deps.links.rules(0, spec.netns)
        own = [host_prefix(a) for a in st.addresses]
        table = choose_table(spec.ifname, used, own, spec.routing.table)
        plan = plan_routing(
            spec.ifname,
            res.ips,
            res.routes,
            table,
            spec.routing.priority,
            spec.routing.default_route_nic == spec.ifname,
        )
        if plan.main_defaults:
            plan = keep_old_default_nic(
                deps.links, spec.netns, plan, spec.routing.priority, used
            )
        plan = with_cluster_routes(
            deps.links,
            spec.netns,
            plan,
            spec.routing.cluster_cidrs,
            spec.routing.default_route_nic == spec.ifname,
        )
        # Recorded before they exist, so a crash half-way still lets DEL clean up.
        st.table, st.rules, st.routes = table, list(plan.rules), list(plan.routes)
        st.routes.extend(plan.main_defaults)
    store.save(st)
    if st.dpdk:
        return  # DPDK: reported, not configured (sriov-cni)
    if spec.routing.rail_sysctls:
        tune_rail_sysctls(deps.links, spec.ifname, spec.netns)
    with timings.step(timings.ADDRESSES):
        add_addresses(deps.links, spec.ifname, spec.netns, st.addresses, rb)
    # The detection window runs beside the routing work, which does not depend
    # on its verdict; a failed check unwinds the routes with everything else.
    detection = start_detection(
        deps.probes, spec.ifname, spec.netns, res.ips, spec.detection, out.link_type
    )
    try:
        if plan is not None:
            with timings.step(timings.ROUTES):
                st.saved_main_defaults = apply_routing(deps.links, spec.netns, plan, rb)
            if st.saved_main_defaults:
                store.save(st)
    except BaseException:
        # The routing error is the one to report; the probes must still end
        # before the rollback takes the address away under them.
        if detection is not None:
            detection.join()
        raise
    with timings.step(timings.DETECTION):
        if detection is not None:
            detection.wait()
        announce(deps.probes, spec.ifname, spec.netns, st.addresses)
