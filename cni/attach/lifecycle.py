# SPDX-License-Identifier: Apache-2.0
"""The VF attachment lifecycle shared by sriov and ib-sriov: attach, detach, check, gc.

Standard library, the contract modules and ``cni.attach.*`` only; every kernel,
sysfs and IPAM access goes through ``cni.deps.Deps`` and ``cni.ipam.IpamClient``.

ADD (``attach``), under the per-PCI lock:
 1. refuse a VF held by a live netns, restore one a dead pod left behind;
    resolve the VF from sysfs;
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

DEL (``detach``) restores from the record whatever ADD recorded, each part
idempotently, and deletes the record only when everything succeeded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cni.attach.allocation import Allocations
from cni.attach.conf import DEFAULT_RULE_PRIORITY
from cni.attach.detection import DetectionPolicy, announce, start_detection
from cni.attach.device import (
    VfDevice,
    host_netdevs,
    link_kind,
    require_link_kind,
    resolve_vf,
)
from cni.attach.ipam_ahead import AllocationAhead
from cni.attach.netdev import (
    configure_in_pod,
    find_returned_vf,
    locate_host_netdev,
    move_into_pod,
    rename_in_host,
    restore_link,
    return_to_host,
)
from cni.attach.pf import apply_pf_settings, read_vf, restore_pf_settings
from cni.attach.routing import (
    add_addresses,
    apply_routing,
    choose_table,
    host_prefix,
    keep_old_default_nic,
    plan_routing,
    remove_routing,
    require_default_route_nic,
    tune_rail_sysctls,
    with_cluster_routes,
)
from cni.attach.teardown import PodSide, find_pod_side, is_the_vf
from cni.errors import (
    CHECK_FAILED,
    DEVICE_ERROR,
    INVALID_CONFIG,
    IPAM_ERROR,
    TRY_AGAIN_LATER,
    CniError,
)
from cni.ipam import (
    Attachment,
    IpamAddress,
    IpamClient,
    IpamError,
    IpamRequest,
    IpamRoute,
)
from cni.kernel import KernelError, LinkInfo, NetnsNotFound
from cni.record.store import VfRecords
from cni.record.vf import PfSettings, Stage, VfState
from cni.rollback import Rollback
from cni.state.locks import Locks

if TYPE_CHECKING:
    from cni.deps import Deps

log = logging.getLogger(__name__)

#: Kept for callers of the names; the stages are ``Stage``.
RESTORED = Stage.RESTORED
RELEASE_PENDING = Stage.RELEASE_PENDING


class ReleasePending(CniError):
    """DEL restored the VF but the release failed (code 11 when ipamd is
    unreachable): only a minimal record (stage ``release-pending``) is kept,
    for the runtime's DEL retry or GC."""


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
            stage=Stage.SAVED,
        )
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
            apply_pf_settings(
                deps.vf, dev.pf, dev.vf_index, spec.pf_settings, st.orig_vf, rb
            )
            for hook in hooks:
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
            st.stage = Stage.ATTACHED
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
        old.stage = Stage.RESTORED
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
    moved = move_into_pod(
        deps.links, deps.netns, st.host_ifname, spec.netns, spec.ifname, rb
    )
    info = configure_in_pod(
        deps.links, spec.ifname, spec.netns, mac, spec.mtu, moved, rb
    )
    # Saved with the next record write (after IPAM, or at the end): DEL can
    # also recognise the VF by its ifindex, which a netns move keeps.
    st.pod_mac, st.pod_mtu, st.stage = info.mac, info.mtu, Stage.MOVED
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
    st.stage = Stage.ADDRESSED
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
    add_addresses(deps.links, spec.ifname, spec.netns, st.addresses, rb)
    # The detection window runs beside the routing work, which does not depend
    # on its verdict; a failed check unwinds the routes with everything else.
    detection = start_detection(
        deps.probes, spec.ifname, spec.netns, res.ips, spec.detection, out.link_type
    )
    try:
        if plan is not None:
            st.saved_main_defaults = apply_routing(deps.links, spec.netns, plan, rb)
            if st.saved_main_defaults:
                store.save(st)
    except BaseException:
        # The routing error is the one to report; the probes must still end
        # before the rollback takes the address away under them.
        if detection is not None:
            detection.join()
        raise
    if detection is not None:
        detection.wait()
    announce(deps.probes, spec.ifname, spec.netns, st.addresses)


# ---------------------------------------------------------------------- DEL


@dataclass(frozen=True, slots=True)
class DetachRequest:
    plugin: str
    network: str
    container_id: str
    ifname: str
    netns: str  # "" when the runtime no longer knows it


def detach(deps: Deps, req: DetachRequest, ipam: IpamClient | None) -> None:
    """DEL: restore everything the record says ADD changed; release the address.

    The kernel side never waits for ipamd: the VF is restored
    first, then the address released. If the release fails then (code 11 when
    ipamd is unreachable), the record is cut down to what a retry needs (stage
    ``release-pending``; the VF and its allocation marker are free) and
    ``ReleasePending`` carries the IPAM's code, so the runtime retries DEL; a
    retry or GC only releases. The VF is taken back from where the record
    says, whatever CNI_NETNS says, and the address is released only once the
    VF is out of the pod or its netns is gone (``cni.attach.teardown``); the
    caller builds ``ipam`` from the record's IPAM (``teardown.ipam_netconf``).
    Without a record there is nothing of ours to restore, but the address may
    still be held (an ADD that died before saving, or a peer-era pod): it is
    released by (container ID, ifname), and an unreachable ipamd is then only
    a WARNING (as Spiderpool does) - ipamd's own GC reclaims what no valid
    attachment holds.
    """
    store = deps.records.vf(req.plugin)
    st = store.load(req.container_id, req.ifname)
    if st is None:
        log.info(
            "no record for %s/%s: nothing to restore", req.container_id, req.ifname
        )
        # An ADD killed while writing its first record left only the temp
        # file of that write; deleting the (absent) record sweeps it.
        store.delete(req.container_id, req.ifname)
        try:
            if ipam is not None:
                ipam.release(req.network, req.container_id, req.ifname)
        except IpamError as exc:
            if exc.code != TRY_AGAIN_LATER and not exc.unchanged:
                raise CniError(exc.code, exc.msg, exc.details) from exc
            log.warning(
                "ipamd unreachable; the address of %s/%s (if any) is left to "
                "ipamd's GC: %s %s",
                req.container_id,
                req.ifname,
                exc.msg,
                exc.details,
            )
        return
    with Locks(deps.state_dir).lock(st.pci):
        failures: list[str] = []
        pending = False
        # A record whose VF is home already (a later ADD's ``_reclaim``, or a
        # DEL that could not release): only the address and the record are left.
        if not st.stage.vf_home:
            failures, pending = restore(deps, st, req.netns)
        if failures:
            st.stage = Stage.DEL_FAILED
            store.save(st)
            raise CniError(
                DEVICE_ERROR,
                f"failed to restore VF {st.pci}",
                "; ".join(failures) + " (the record is kept; DEL can be retried)",
            )
        if not pending and not st.stage.vf_home:
            # The VF is home: another pod may take it even if the release fails.
            # (Not for a record whose VF was home before: it may be taken.)
            Allocations(deps.state_dir).release(st.pci)
        if pending:
            # The VF is still inside a netns that lives, where we could not
            # take it from: it may carry its address, so nothing is released.
            # The record (and the allocation marker) stay for GC or a retry.
            log.warning(
                "VF %s not back in the host yet; its address stays held until "
                "DEL or GC brings it home",
                st.pci,
            )
            st.stage = Stage.AWAITING_VF
            store.save(st)
            return
        try:
            _release(ipam, st.network or req.network, st.container_id, st.ifname)
        except CniError as exc:
            # The VF is free now: a retry must never restore it again, so
            # whatever the IPAM error, only the release is left on record.
            _keep_for_release(store, st)
            raise ReleasePending(
                exc.code,
                f"VF {st.pci} restored; releasing its address failed: {exc.msg}",
                f"{exc.details} (a release-pending record is kept; DEL or GC "
                "finishes it)",
            ) from exc
        if st.stage.vf_home:
            store.delete(st.container_id, st.ifname)
            return
        store.delete(st.container_id, st.ifname)
        log.info("released VF %s (%s) from %s", st.pci, st.host_ifname, st.netns)


def _keep_for_release(store: VfRecords, st: VfState) -> None:
    """Cut the record down to what releasing needs; the VF itself is restored."""
    log.warning(
        "VF %s restored but ipamd is unreachable; %s/%s kept as release-pending",
        st.pci,
        st.container_id,
        st.ifname,
    )
    store.save(
        VfState(
            container_id=st.container_id,
            ifname=st.ifname,
            network=st.network,
            netns=st.netns,
            pci=st.pci,
            addresses=list(st.addresses),
            ipam_type=st.ipam_type,
            ipam_conf=dict(st.ipam_conf),
            extra=dict(st.extra),
            stage=Stage.RELEASE_PENDING,
        )
    )


def _release(
    ipam: IpamClient | None, network: str, container_id: str, ifname: str
) -> None:
    if ipam is None:
        return
    try:
        ipam.release(network, container_id, ifname)
    except IpamError as exc:
        raise CniError(exc.code, exc.msg, exc.details) from exc


def restore(deps: Deps, st: VfState, netns: str) -> tuple[list[str], bool]:
    """Undo an attachment from its record.

    Returns what could not be undone, and whether the VF netdev is still out
    of reach (in a netns that lives, but not where the record says). ``netns``
    is the runtime's CNI_NETNS ("" = unknown); the record decides where the
    VF is taken back from (``cni.attach.teardown``). Each part is idempotent
    so a retried DEL completes a half-done one.
    """
    failures: list[str] = []
    pending = False
    side = find_pod_side(deps, st, netns)
    pod, in_pod = side.netns, side.link
    if pod is not None and (in_pod is not None or st.rules or st.saved_main_defaults):
        # Also when the VF already left the pod: a DEL that failed after moving
        # it home must not strand its rules (they outlive the link) on retry.
        failures += remove_routing(
            deps.links, pod, st.rules, st.routes, st.saved_main_defaults
        )
    if st.pf is not None and st.vf_index is not None and st.orig_vf is not None:
        # Before the netdev leaves the pod, as sriov-cni does: some drivers
        # reject an admin MAC reset otherwise.
        failures += restore_pf_settings(
            deps.vf, st.pf, st.vf_index, st.pf_settings, st.orig_vf
        )
    if not st.dpdk:
        try:
            pending = not _restore_netdev(deps, st, side)
        except (KernelError, CniError) as exc:
            failures.append(f"restore netdev {st.host_ifname}: {exc}")
    if st.rdma_device:
        from cni.attach import rdma

        try:
            # From the recorded netns while it lives; once it is gone the
            # kernel sent the device home already (tolerated), unless the
            # runtime names the same netns under a new path.
            moved = rdma.move_rdma_out(
                deps.rdma, st.rdma_device, pod or netns or st.netns
            )
        except CniError as exc:
            failures.append(f"move RDMA device {st.rdma_device} back: {exc}")
        else:
            if moved is rdma.MoveOutcome.MOVED and not st.dpdk and not pending:
                try:
                    _rehome_netdev(deps, st)
                except (KernelError, CniError) as exc:
                    failures.append(f"rename netdev of {st.pci} back: {exc}")
    return failures, pending


def _rehome_netdev(deps: Deps, st: VfState) -> None:
    """After the RDMA device came home: the netdev under its host name again.

    On IPoIB the kernel recreates the ULP netdev in the default netns when its
    RDMA device changes netns, possibly under another name: find it by PCI
    (then by its recorded name) and give it back name, MAC and MTU.
    """
    assert st.host_ifname is not None
    found = locate_host_netdev(
        deps.links, host_netdevs(deps.sysfs, st.pci), st.host_ifname, None, None
    )
    if found is None:
        log.warning("VF %s netdev not in the host after its RDMA device", st.pci)
        return
    if found.name != st.host_ifname:
        log.info("VF %s netdev came back as %s", st.pci, found.name)
        rename_in_host(deps.links, deps.netns, found.name, st.host_ifname)
    restore_link(deps.links, st.host_ifname, st.orig_mac, st.orig_mtu, None)


def _restore_netdev(deps: Deps, st: VfState, side: PodSide) -> bool:
    """Bring the netdev home with its name, MAC and MTU; False if out of reach."""
    host_name = st.host_ifname
    assert host_name is not None
    if side.link is not None and side.netns is not None:
        return_to_host(deps.links, deps.netns, side.link.name, side.netns, host_name)
    else:
        back = find_returned_vf(
            deps.links,
            host_netdevs(deps.sysfs, st.pci),
            st.ifname,
            st.pod_mac,
            st.host_ifindex,
        )
        if back is None:
            if side.recorded_alive and st.pod_mac:
                # Moved into a netns that lives, yet not found there: it may
                # still carry the address (renamed, moved on); never guess.
                return False
            # Never moved (ADD died early), or its netns is gone and took the
            # device with it (a veth stand-in): nothing left to restore.
            log.warning("VF %s netdev not found in the pod or the host", st.pci)
            return True
        if back.name != host_name:
            rename_in_host(deps.links, deps.netns, back.name, host_name)
    restore_link(deps.links, host_name, st.orig_mac, st.orig_mtu, None)
    return True


# ------------------------------------------------------------------- CHECK


def check(
    deps: Deps,
    plugin: str,
    container_id: str,
    ifname: str,
    netns: str,
    prev_ips: Sequence[str],
    prev_mac: str,
) -> None:
    """CHECK: the interface, its addresses, routes and rules are as ADD left them."""
    st = deps.records.vf(plugin).load(container_id, ifname)
    if st is None:
        raise CniError(
            CHECK_FAILED,
            f"no attachment recorded for {ifname}",
            f"container {container_id}",
        )
    if netns != st.netns:
        raise CniError(
            CHECK_FAILED,
            f"{ifname} was attached in another netns",
            f"CNI_NETNS {netns}, recorded at ADD {st.netns} (VF {st.pci})",
        )
    if st.dpdk:
        return
    try:
        link = deps.links.find(ifname, netns)
    except NetnsNotFound as exc:
        raise CniError(
            CHECK_FAILED, f"the pod netns {netns} of {ifname} is gone", str(exc)
        ) from exc
    if link is None or not is_the_vf(link, st, True):
        where = "is in the host" if host_netdevs(deps.sysfs, st.pci) else "is not"
        raise CniError(
            CHECK_FAILED,
            f"VF {st.pci} is not in its recorded netns as {ifname}",
            f"netns {netns}: {ifname} "
            + ("is another link" if link is not None else "not found")
            + f"; the VF {where}",
        )
    if prev_mac and link.mac != prev_mac.lower():
        raise CniError(
            CHECK_FAILED,
            f"interface {ifname} MAC differs",
            f"prevResult {prev_mac}, found {link.mac}",
        )
    have: set[str] = set(deps.links.addresses(ifname, netns))
    missing = [a for a in (*st.addresses, *prev_ips) if a not in have]
    if missing:
        raise CniError(
            CHECK_FAILED,
            f"addresses missing on {ifname}",
            ", ".join(dict.fromkeys(missing)),
        )
    rules = deps.links.rules(0, netns)
    for rule in st.rules:
        if not any(r.src == rule.src and r.table == rule.table for r in rules):
            raise CniError(
                CHECK_FAILED,
                f"rule from {rule.src} missing",
                f"expected lookup {rule.table} pref {rule.priority}",
            )
    for table in sorted({r.table for r in st.routes}):
        present = {r.dst for r in deps.links.routes(table, 0, netns)}
        for route in st.routes:
            if route.table == table and route.dst not in present:
                raise CniError(
                    CHECK_FAILED,
                    f"route {route.dst} missing",
                    f"table {table} on {ifname}",
                )


# ---------------------------------------------------------------------- GC


def gc(
    deps: Deps,
    plugin: str,
    network: str,
    valid: Sequence[Attachment],
    ipam: IpamClient | None,
    ipam_for: Callable[[VfState], IpamClient | None] | None = None,
) -> list[str]:
    """GC: restore and release every recorded attachment of ``network`` not in
    ``valid``; then let the IPAM collect its own leftovers. Continues on errors
    (SPEC.md "GC") and returns them. ``ipam_for`` gives the IPAM that
    allocated a record (``commands.record_ipams``), default ``ipam``."""
    keep = {(a.container_id, a.ifname) for a in valid}
    errors: list[str] = []
    for st in deps.records.vf(plugin).all():
        if st.network != network or (st.container_id, st.ifname) in keep:
            continue
        try:
            detach(
                deps,
                DetachRequest(plugin, network, st.container_id, st.ifname, st.netns),
                ipam_for(st) if ipam_for is not None else ipam,
            )
        except CniError as exc:
            errors.append(f"{st.container_id}/{st.ifname}: {exc}")
    if ipam is not None:
        try:
            ipam.gc(network, valid)
        except IpamError as exc:
            errors.append(f"ipam gc: {exc.msg}")
    return errors
