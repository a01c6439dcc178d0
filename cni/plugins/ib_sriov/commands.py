# SPDX-License-Identifier: Apache-2.0
"""The ib-sriov plugin: an IPoIB VF (and optionally its RDMA device) into the pod.

The VF lifecycle is the shared one (``cni.attach``: lock, record,
PF settings, RDMA move before the netdev, netdev, IPAM, detection, policy
routing, rollback). What is InfiniBand-specific lives here:

- the GUID (``runtimeConfig.infinibandGUID`` > ``args.cni.guid``), set as node
  and port GUID on the PF, made effective by rebinding the VF driver; the
  plugin then waits - on uevents, bounded, no sleep-polling - for the netdev
  (and, with ``rdmaIsolation``, the RDMA device) to come back, and re-reads
  the netdev name by PCI address because a rebind may rename it (P9);
- the original GUIDs and netdev name in a record of their own
  (the record's ``IbSection``), written before the first GUID write. DEL
  restores the GUID (all-F when the original was unset or zero, like the
  peer), rebinds, and renames the netdev back to its original name; the record
  goes only once that worked, so a failed DEL (or the ADD rollback) can be
  retried. It is separate from the VF record because the shared DEL deletes
  that one as soon as the netdev is home;
- a per-PF lock around ADD and DEL: a rebind re-creates the VF's netdev and
  RDMA device, so VFs of one PF are serialised while one is in flight, but a
  rebind on one PF never blocks pods on another (the peer takes one global
  lock);
- ``pkey`` validated and kept in the state (``extra.pkey``) and ``dhcp``
  refused (in ``config``).

IPoIB hardware addresses are 20 bytes: the address probes (``cni.kernel.probes``)
skip IPoIB links with a log line; a veth stand-in in the simulated host is
probed as Ethernet.

Imports only light modules at top; adapters come through ``cni.deps``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from cni.attach.attach import AttachContext, AttachSpec, attach
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
from cni.attach.detach import DetachRequest, ReleasePending, detach
from cni.attach.device import INFINIBAND
from cni.attach.gc import gc as gc_vfs
from cni.attach.ipam_glue import to_result
from cni.attach.netdev import rename_in_host
from cni.deps import default_deps
from cni.errors import CHECK_FAILED, DEVICE_ERROR, STATUS_UNAVAILABLE, CniError
from cni.ipam import IpamClient
from cni.kernel import KernelError, NotSupported, Timeout
from cni.plugins.binding import Commands, bind, gc_failed
from cni.plugins.ib_sriov.config import IbConf, load_conf
from cni.record.sections import IbSection
from cni.record.vf import PfSettings, Stage
from cni.skel import CmdArgs, PluginFuncs
from cni.state.locks import Locks
from cni.types import Result

if TYPE_CHECKING:
    from cni.deps import Deps, DepsFactory

log = logging.getLogger(__name__)

PLUGIN = "ib-sriov"
ALL_F_GUID = "ff:ff:ff:ff:ff:ff:ff:ff"
ZERO_GUID = "00:00:00:00:00:00:00:00"
VFIO = "vfio-pci"
#: Seconds to wait for the VF's netdev / RDMA device after a driver rebind.
REBIND_TIMEOUT_ENV = "RAILYARD_IB_REBIND_TIMEOUT"
DEFAULT_REBIND_TIMEOUT = 15.0


def rebind_timeout(env: Mapping[str, str]) -> float:
    raw = env.get(REBIND_TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_REBIND_TIMEOUT
    except ValueError:
        log.warning(
            "%s=%r is not a number; using %gs",
            REBIND_TIMEOUT_ENV,
            raw,
            DEFAULT_REBIND_TIMEOUT,
        )
        return DEFAULT_REBIND_TIMEOUT
    return value if value > 0 else DEFAULT_REBIND_TIMEOUT


def _unset(guid: str | None) -> bool:
    return not guid or guid.lower() in (ZERO_GUID, ALL_F_GUID)


def pf_lock_key(deps: Deps, pci: str) -> str:
    """The per-PF lock key of VF ``pci`` (the VF's own key if it has no PF)."""
    try:
        pf_pci = deps.sysfs.pf_of(pci)
    except (KernelError, OSError):
        pf_pci = None
    return f"ib-pf-{pf_pci or pci}"


# ------------------------------------------------------------ GUID + rebind


def rebind_and_wait(
    deps: Deps, pci: str, timeout: float, rdma: bool
) -> tuple[str, str | None]:
    """Rebind the VF driver; the netdev (and RDMA device) it comes back as.

    The uevent monitor is listening before the rebind, so no event is lost; the
    wait is bounded by ``timeout`` for the netdev and the RDMA device together.
    """
    started = time.monotonic()
    with deps.waiter.watch():
        try:
            deps.vf.rebind(pci)
        except KernelError as exc:
            raise CniError(
                DEVICE_ERROR, f"failed to rebind the driver of VF {pci}", str(exc)
            ) from exc
        rdma_dev = None
        try:
            name = deps.waiter.wait_netdev(pci, timeout)
            if rdma:
                left = max(timeout - (time.monotonic() - started), 0.0)
                rdma_dev = deps.waiter.wait_rdma(pci, left)
        except Timeout as exc:
            raise CniError(
                DEVICE_ERROR,
                f"VF {pci} did not come back within {timeout:g}s after the driver "
                "rebind",
                str(exc),
            ) from exc
    log.info("VF %s is back as %s after %.3fs", pci, name, time.monotonic() - started)
    return name, rdma_dev


def _set_guids(deps: Deps, pf: str, vf: int, node: str, port: str) -> None:
    for what, setter, guid in (
        ("node", deps.vf.set_node_guid, node),
        ("port", deps.vf.set_port_guid, port),
    ):
        try:
            setter(pf, vf, guid)
        except KernelError as exc:
            raise CniError(
                DEVICE_ERROR,
                f"failed to set the {what} GUID of VF {vf} on {pf} to {guid}",
                str(exc),
            ) from exc


def restore_guid(deps: Deps, ib: IbSection, timeout: float) -> None:
    """Put back the VF's original GUIDs and netdev name from the IB section.

    An unset or all-zero original is restored as all-F (ib-sriov-cni's default:
    the VF then gets a GUID from the subnet manager's policy again).
    """
    node = ALL_F_GUID if _unset(ib.orig_node_guid) else str(ib.orig_node_guid).lower()
    port = ALL_F_GUID if _unset(ib.orig_port_guid) else str(ib.orig_port_guid).lower()
    _set_guids(deps, ib.pf, ib.vf_index, node, port)
    log.info("GUIDs of VF %s restored to node %s port %s", ib.pci, node, port)
    if ib.dpdk:
        return  # vfio: no netdev to bring back (the peer skips the rebind too)
    name, _ = rebind_and_wait(deps, ib.pci, timeout, ib.rdma)
    original = ib.host_ifname
    if original and name != original:
        rename_in_host(deps.links, deps.netns, name, original)
        log.info("VF %s netdev renamed back from %s to %s", ib.pci, name, original)


class GuidHook:
    """The lifecycle hook of an ib-sriov ADD (runs after the PF settings)."""

    def __init__(self, conf: IbConf, args: CmdArgs, timeout: float) -> None:
        self.conf = conf
        self.args = args
        self.timeout = timeout

    def __call__(self, ctx: AttachContext) -> None:
        st, deps, conf = ctx.state, ctx.deps, self.conf
        assert st.pf is not None and st.vf_index is not None
        orig = st.orig_vf
        pf_pci = deps.sysfs.pf_of(st.pci)
        st.extra.update(pkey=conf.pkey, guid=conf.guid, pf_pci=pf_pci)
        if conf.vfio_pci_mode and not st.dpdk:
            raise CniError(
                DEVICE_ERROR,
                f"vfioPciMode is set but VF {st.pci} is not bound to {VFIO}",
                f"its driver is {ctx.device.driver}",
            )
        if not conf.guid:
            # ib-sriov-cni: without a GUID the VF must already have a usable one.
            if not st.dpdk and (orig is None or _unset(orig.node_guid)):
                raise CniError(
                    DEVICE_ERROR,
                    f"VF {st.pci} GUID is not valid",
                    f"node GUID {orig.node_guid if orig else None}; give one in "
                    "runtimeConfig.infinibandGUID or args.cni.guid",
                )
            ctx.save()
            return
        cid, ifname = self.args.container_id, self.args.ifname
        ib = IbSection(
            pci=st.pci,
            pf=st.pf,
            pf_pci=pf_pci,
            vf_index=st.vf_index,
            orig_node_guid=orig.node_guid if orig else None,
            orig_port_guid=orig.port_guid if orig else None,
            guid=conf.guid,
            pkey=conf.pkey,
            host_ifname=st.host_ifname,
            dpdk=st.dpdk,
            rdma=conf.rdma_isolation,
            network=conf.name,
        )
        earlier = deps.records.load_ib(cid, ifname)
        if earlier is not None and earlier.pci == st.pci:
            # A record left by an ADD whose rollback failed: the VF may still
            # carry *our* GUID and name, so the originals are the recorded ones.
            ib.orig_node_guid = earlier.orig_node_guid
            ib.orig_port_guid = earlier.orig_port_guid
            ib.host_ifname = earlier.host_ifname
        # Saved, and its undo registered, before the first GUID write: a crash
        # or a failure from here on still knows what to put back (issue #217:
        # the peer caches the *new* GUID as the original on a retried ADD).
        deps.records.save_ib(cid, ifname, ib)
        ctx.rb.push(lambda: self._undo(deps, ib), f"restore the GUID of VF {st.pci}")
        _set_guids(deps, st.pf, st.vf_index, conf.guid, conf.guid)
        if not st.dpdk:
            try:
                name, rdma_dev = rebind_and_wait(
                    deps, st.pci, self.timeout, conf.rdma_isolation
                )
            except CniError as exc:
                # Printed after the Rollback unwound; an undo that failed is
                # appended to these details by skel.
                raise CniError(
                    exc.code, exc.msg, f"{exc.details}; the ADD was rolled back"
                ) from exc
            # Re-resolved by PCI: the netdev may be back under another name.
            link = deps.links.get(name)
            st.host_ifname, st.host_ifindex, st.orig_mac = name, link.index, link.mac
            if rdma_dev and st.rdma_device and rdma_dev != st.rdma_device:
                # The kernel numbered the recreated RDMA device anew; the
                # lifecycle resolves it again after the hooks, before moving it.
                log.info("VF %s RDMA device is now %s", st.pci, rdma_dev)
        ctx.save()

    def _undo(self, deps: Deps, ib: IbSection) -> None:
        try:
            restore_guid(deps, ib, self.timeout)
        except CniError as exc:
            if not isinstance(exc.__cause__, NotSupported):
                raise
            # The PF refuses GUIDs altogether: ours was never written either.
            log.warning("VF %s takes no GUID (%s); nothing to restore", ib.pci, exc)
        deps.records.delete_ib(self.args.container_id, self.args.ifname)


# --------------------------------------------------------------------- ADD


def attach_spec(args: CmdArgs, conf: IbConf) -> AttachSpec:
    """The netconf and env of an ADD as the shared VF lifecycle wants them."""
    spec = attach_spec_for(PLUGIN, args, conf, PfSettings(link_state=conf.link_state))
    # Checked before the first change: on an Ethernet VF the GUID write fails,
    # and so would its undo, leaving a record no DEL could clear.
    return replace(
        spec,
        link_kind=INFINIBAND,
        link_kind_reason="GUIDs and pkeys exist only on InfiniBand",
    )


def add(args: CmdArgs, conf: IbConf, deps: Deps, ipam: IpamClient | None) -> Result:
    hook = GuidHook(conf, args, rebind_timeout(args.env))
    with Locks(deps.state_dir).lock(pf_lock_key(deps, conf.device_id)):
        att = attach(deps, attach_spec(args, conf), ipam, hooks=[hook])
    return to_result(att, conf.cni_version)


# --------------------------------------------------------------------- DEL


def _finish_guid(deps: Deps, cid: str, ifname: str, timeout: float) -> None:
    """Restore the GUID once the VF is home (its VF record gone); keep on error."""
    records = deps.records
    ib = records.load_ib(cid, ifname)
    if ib is None:
        return
    st = records.vf(PLUGIN).load(cid, ifname)
    if st is not None and st.stage is not Stage.RELEASE_PENDING:
        # The shared DEL kept the VF record: the netdev is not home yet (netns
        # unknown), so a rebind now would pull it out of a live pod. GC or a
        # later DEL finishes. (A release-pending record's VF is home.)
        log.warning("VF %s not back yet; its GUID is restored later", ib.pci)
        return
    try:
        restore_guid(deps, ib, timeout)
    except (CniError, KernelError) as exc:
        if isinstance(exc.__cause__, NotSupported):
            # The PF refuses GUIDs altogether (a record left by an ADD on an
            # Ethernet VF before it was refused up front): nothing to restore.
            log.warning("VF %s takes no GUID (%s); record dropped", ib.pci, exc)
            records.delete_ib(cid, ifname)
            return
        raise CniError(
            DEVICE_ERROR,
            f"failed to restore the GUID of VF {ib.pci}",
            f"{exc} (the record is kept; DEL can be retried)",
        ) from exc
    records.delete_ib(cid, ifname)


def delete(args: CmdArgs, conf: IbConf, deps: Deps, ipam: IpamClient | None) -> None:
    st = deps.records.vf(PLUGIN).load(args.container_id, args.ifname)
    ib = deps.records.load_ib(args.container_id, args.ifname)
    pci = st.pci if st else (ib.pci if ib else "")
    req = DetachRequest(PLUGIN, conf.name, args.container_id, args.ifname, args.netns)
    if not pci:
        detach(deps, req, ipam)  # nothing recorded: releases the address only
        return
    timeout = rebind_timeout(args.env)
    with Locks(deps.state_dir).lock(pf_lock_key(deps, pci)):
        try:
            detach(deps, req, ipam)
        except ReleasePending:
            # The VF is home, only ipamd was out of reach: its GUID goes back
            # now; the retried DEL (or GC) only releases the address.
            _finish_guid(deps, args.container_id, args.ifname, timeout)
            raise
        _finish_guid(deps, args.container_id, args.ifname, timeout)


# ------------------------------------------------------- CHECK, GC, STATUS


def check(args: CmdArgs, conf: IbConf, deps: Deps, ipam: IpamClient | None) -> None:
    prev = prev_attachment(conf.base.prev_result, args.ifname)
    check_vf(deps, ipam, PLUGIN, conf.name, args, prev)
    st = deps.records.vf(PLUGIN).load(args.container_id, args.ifname)
    if st is not None and st.rdma_device:
        if st.rdma_device not in deps.rdma.devices(args.netns):
            raise CniError(
                CHECK_FAILED, f"RDMA device {st.rdma_device} is not in {args.netns}"
            )


def gc(args: CmdArgs, conf: IbConf, deps: Deps, ipam: IpamClient | None) -> None:
    """GC: stale records released through the IPAM that allocated each; GUIDs
    of gone attachments rebound."""
    gc_through(real_ipam)(args, conf, deps, ipam)


def gc_through(
    make_ipam: IpamFactory,
) -> Callable[[CmdArgs, IbConf, Deps, IpamClient | None], None]:
    """GC whose records are released through the IPAM that allocated each
    (``teardown.ipam_netconf``), built with ``make_ipam`` when it is not the
    netconf's."""

    def run(args: CmdArgs, conf: IbConf, deps: Deps, ipam: IpamClient | None) -> None:
        with record_ipams(args, make_ipam, ipam) as ipam_for:
            errors = gc_vfs(
                deps, PLUGIN, conf.name, args.valid_attachments, ipam, ipam_for
            )
        timeout = rebind_timeout(args.env)
        for cid, ifname, ib in deps.records.all_ib():
            if ib.network != conf.name or args.is_valid_attachment(cid, ifname):
                continue
            try:
                with Locks(deps.state_dir).lock(pf_lock_key(deps, ib.pci)):
                    _finish_guid(deps, cid, ifname, timeout)
            except CniError as exc:
                errors.append(f"{cid}/{ifname}: {exc}")
        gc_failed(errors)

    return run


def status(args: CmdArgs, conf: IbConf, deps: Deps, ipam: IpamClient | None) -> None:
    """STATUS: 50 when IPAM is unavailable or rdmaIsolation cannot work here."""
    if conf.rdma_isolation:
        from cni.attach.rdma import require_exclusive

        try:
            require_exclusive(deps.rdma)
        except CniError as exc:
            raise CniError(STATUS_UNAVAILABLE, exc.msg, exc.details) from exc
    ipam_status(ipam)


COMMANDS = Commands(
    load_conf=load_conf,
    add=add,
    delete=delete,
    check=check,
    status=status,
    gc=gc,
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
