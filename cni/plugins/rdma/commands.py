# SPDX-License-Identifier: Apache-2.0
"""The chained ``rdma`` plugin: move the VF's RDMA device into the pod and back.

rdma-cni compatible, with its gaps closed:

- ADD needs ``prevResult`` (it runs after ``sriov`` in a conflist), requires
  exclusive RDMA netns mode, finds the RDMA device of ``deviceID`` (or, without
  one, of the VF whose MAC the prevResult's interface carries), saves the state
  *before* moving (a crash after the move still leaves DEL what it needs), moves
  it, and passes prevResult through (skel converts it to the config's version).
- DEL moves the device back also with an empty CNI_NETNS (from the netns the
  state recorded; when that netns died the kernel already returned the device
  to the host) and always removes its state (rdma-cni leaks it, PR #165). A
  second DEL finds no state and succeeds.
- CHECK verifies the device is in the pod netns; GC restores devices of
  attachments the runtime no longer knows; STATUS reports 50 when RDMA is
  unusable (no RDMA or shared mode).
- ADD and DEL of one VF serialise on its per-PCI lock (``cni.state.locks``).
- ``rdmaDevName`` renames the device in the pod after the move, ``roceTos``
  marks its RoCE traffic before it (``cni.attach.roce``); both are undone on
  every path: the ADD's rollback, DEL (the name back inside the pod, or in
  the host when the netns died first, then the move, then the TOS) and GC.

Imports only light modules at top; adapters come through ``cni.deps``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cni.attach.rdma import (
    MoveOutcome,
    move_rdma_in,
    move_rdma_out,
    rename_rdma_home,
    rename_rdma_in,
    require_exclusive,
    resolve_rdma_device,
)
from cni.attach.roce import (
    check_roce_link,
    read_roce_tos,
    restore_roce_tos,
    set_roce_tos,
)
from cni.deps import Deps, DepsFactory, default_deps
from cni.errors import (
    CHECK_FAILED,
    DEVICE_ERROR,
    INVALID_CONFIG,
    STATUS_UNAVAILABLE,
    CniError,
)
from cni.kernel import KernelError, VfInfo
from cni.plugins.binding import Commands, bind, gc_failed
from cni.plugins.rdma.config import RdmaConf, load_conf
from cni.record.sections import RdmaSection
from cni.record.store import AttachmentRecords
from cni.rollback import Rollback
from cni.skel import CmdArgs, PluginFuncs
from cni.state.locks import Locks
from cni.types import Interface, Result

if TYPE_CHECKING:
    from cni.attach.commands import IpamFactory

log = logging.getLogger(__name__)

PLUGIN = "rdma"
NO_DEVICE_ID = '"DeviceID" network configuration attribute is required for rdma CNI'


# ------------------------------------------------------------ VF from MAC


def _guid_of(hwaddr: str) -> str | None:
    """The GUID (last 8 bytes) of a 20-byte IPoIB hardware address."""
    parts = hwaddr.split(":")
    return ":".join(parts[-8:]) if len(parts) == 20 else None


def _matches(info: VfInfo, mac: str) -> bool:
    guid = _guid_of(mac)
    if guid is not None:
        return guid in {(info.port_guid or "").lower(), (info.node_guid or "").lower()}
    return info.mac.lower() == mac and mac != "00:00:00:00:00:00"


def _container_interface(prev: Result) -> Interface:
    ifaces = [i for i in prev.interfaces if i.sandbox]
    if len(ifaces) != 1:
        raise CniError(
            INVALID_CONFIG,
            NO_DEVICE_ID,
            f"prevResult has {len(ifaces)} container interfaces; without deviceID "
            "exactly one is needed to find the VF by its MAC",
        )
    if not ifaces[0].mac:
        raise CniError(
            INVALID_CONFIG,
            NO_DEVICE_ID,
            f"prevResult interface {ifaces[0].name} has no MAC to find the VF by",
        )
    return ifaces[0]


def derive_pci(ca: CmdArgs, prev: Result, deps: Deps) -> str:
    """The VF's PCI address from the MAC of prevResult's container interface.

    rdma-cni scans the PFs' VF tables for that *admin* MAC. We do the same (for
    an IPoIB address, its GUID against the VF's node/port GUID), then fall back
    to our own sriov/ib-sriov state for this container and ifname, which works
    when no admin MAC was set on the VF.
    """
    iface = _container_interface(prev)
    mac = iface.mac.lower()
    for pf_pci in deps.sysfs.pfs():
        pf_names = deps.sysfs.netdevs(pf_pci)
        if not pf_names:
            continue
        for index, vf_pci in deps.sysfs.vfs(pf_pci).items():
            try:
                info = deps.vf.get_vf(pf_names[0], index)
            except KernelError as exc:
                log.debug("VF %d of %s unreadable: %s", index, pf_names[0], exc)
                continue
            if _matches(info, mac):
                log.info("interface %s (%s) is VF %s", iface.name, mac, vf_pci)
                return vf_pci
    st = deps.records.any_vf(ca.container_id, iface.name)
    if st is not None and st.pci:
        log.info("interface %s is VF %s (from its VF record)", iface.name, st.pci)
        return st.pci
    raise CniError(
        DEVICE_ERROR,
        f"failed to find the VF of interface {iface.name} ({mac})",
        "no PF lists a VF with that MAC/GUID and no sriov state names it; set deviceID",
    )


# --------------------------------------------------------------- commands


def _already_attached(deps: Deps, ca: CmdArgs, pci: str) -> bool:
    """A repeated ADD of an attachment that is in place succeeds unchanged.

    Without this, the retried move would fail (the device is no longer in the
    host) and its rollback would delete the record the first ADD wrote, so
    DEL could no longer bring the device back.
    """
    rdma = deps.records.load_rdma(ca.container_id, ca.ifname)
    if rdma is None or rdma.device_id != pci:
        return False
    dev = rdma.container_dev
    try:
        present = dev in deps.rdma.devices(ca.netns)
    except KernelError:
        return False
    if present:
        log.info("RDMA device %s already in %s: ADD repeated", dev, ca.netns)
    return present


def add(ca: CmdArgs, conf: RdmaConf, deps: Deps, ipam: None) -> Result | None:
    require_exclusive(deps.rdma)
    prev = ca.conf.prev_result
    assert prev is not None  # load_conf refuses an ADD without one
    pci = conf.device_id or derive_pci(ca, prev, deps)
    records = deps.records
    with Locks(deps.state_dir).lock(pci), Rollback(log) as rb:
        if _already_attached(deps, ca, pci):
            return None
        dev = resolve_rdma_device(deps.sysfs, pci)
        tos = conf.roce_tos
        section = RdmaSection(
            device_id=pci,
            container_dev=conf.dev_name or dev,  # its name in the pod
            sandbox_dev=dev,
            netns=ca.netns,  # what DEL needs when CNI_NETNS is "" (rdma-cni: none)
            network=conf.base.name,
            roce_tos=tos,
        )
        if tos is not None:
            check_roce_link(deps.sysfs, pci, dev, tos)
            section.roce_before = read_roce_tos(deps.roce_tos, dev, pci)
        # Written before the first change: a crash anywhere below leaves DEL
        # both names and the TOS to put back.
        records.save_rdma(ca.container_id, ca.ifname, section)
        rb.push(
            lambda: records.delete_rdma(ca.container_id, ca.ifname),
            "delete the rdma state",
        )
        if tos is not None and section.roce_before is not None:
            set_roce_tos(deps.roce_tos, dev, pci, tos, section.roce_before, rb)
        move_rdma_in(deps.rdma, dev, ca.netns, rb)
        if section.container_dev != dev:
            rename_rdma_in(deps.rdma, dev, section.container_dev, ca.netns, rb)
        rb.commit()
    log.info(
        "RDMA device %s of %s moved into %s as %s",
        dev,
        pci,
        ca.netns,
        section.container_dev,
    )
    return None  # skel prints prevResult, converted to the config's cniVersion


def _restore(
    deps: Deps,
    records: AttachmentRecords,
    cid: str,
    ifname: str,
    rdma: RdmaSection,
    netns: str,
) -> None:
    dev, pci, recorded = rdma.host_dev, rdma.device_id, rdma.netns
    if netns and recorded and netns != recorded:
        log.warning(
            "DEL of %s/%s: CNI_NETNS %s is not the netns ADD used (%s); "
            "following the record",
            cid,
            ifname,
            netns,
            recorded,
        )
    with Locks(deps.state_dir).lock(pci or f"rdma-{dev}"):
        # Its host name first, where it is now (the pod, or the host when the
        # netns died with it inside): the move and the TOS know it by that.
        rename_rdma_home(deps.rdma, rdma.container_dev, dev, recorded or netns or None)
        # The netns ADD moved the device into first (cni.attach.teardown); the
        # runtime's only when that one no longer shows it (a new path).
        outcome = move_rdma_out(deps.rdma, dev, recorded or netns or None)
        if outcome is MoveOutcome.NOT_FOUND and netns and netns != recorded:
            rename_rdma_home(deps.rdma, rdma.container_dev, dev, netns)
            outcome = move_rdma_out(deps.rdma, dev, netns)
        log.info("RDMA device %s: %s", dev, outcome.value)
        if rdma.roce_before is not None and outcome is not MoveOutcome.NOT_FOUND:
            restore_roce_tos(deps.roce_tos, dev, pci, rdma.roce_before)
        records.delete_rdma(cid, ifname)


def delete(ca: CmdArgs, conf: RdmaConf, deps: Deps, ipam: None) -> None:
    records = deps.records
    rdma = records.load_rdma(ca.container_id, ca.ifname)
    if rdma is None:
        log.warning(
            "no rdma state for %s/%s: nothing to restore", ca.container_id, ca.ifname
        )
        # An ADD killed while writing its state left only the temp file of
        # that write; deleting the (absent) state sweeps it.
        records.delete_rdma(ca.container_id, ca.ifname)
        return
    _restore(deps, records, ca.container_id, ca.ifname, rdma, ca.netns)


def check(ca: CmdArgs, conf: RdmaConf, deps: Deps, ipam: None) -> None:
    rdma = deps.records.load_rdma(ca.container_id, ca.ifname)
    if rdma is None:
        raise CniError(CHECK_FAILED, "no rdma state for this attachment")
    dev = rdma.container_dev
    try:
        present = dev in deps.rdma.devices(ca.netns)
    except KernelError as exc:
        raise CniError(
            CHECK_FAILED, f"cannot list RDMA devices in {ca.netns}", str(exc)
        ) from exc
    if not present:
        raise CniError(CHECK_FAILED, f"RDMA device {dev} is not in {ca.netns}")


def gc(ca: CmdArgs, conf: RdmaConf, deps: Deps, ipam: None) -> None:
    """Restore the devices of attachments of this network the runtime dropped."""
    records = deps.records
    errors: list[str] = []
    for att in records.all():
        rdma = att.rdma
        if rdma is None or rdma.network != conf.base.name:
            continue
        if ca.is_valid_attachment(att.container_id, att.ifname):
            continue
        try:
            _restore(deps, records, att.container_id, att.ifname, rdma, "")
        except CniError as exc:  # GC goes on (SPEC.md "GC"), then reports
            errors.append(f"{att.container_id}/{att.ifname}: {exc}")
    gc_failed(errors)


def status(ca: CmdArgs, conf: RdmaConf, deps: Deps, ipam: None) -> None:
    try:
        require_exclusive(deps.rdma)
    except CniError as exc:
        raise CniError(STATUS_UNAVAILABLE, exc.msg, exc.details) from exc


COMMANDS = Commands(
    load_conf=load_conf,
    add=add,
    delete=delete,
    check=check,
    status=status,
    gc=gc,
    ipam_in=(),  # rdma allocates no address
)


def plugin_funcs(
    make_deps: DepsFactory | None = None, make_ipam: IpamFactory | None = None
) -> PluginFuncs:
    """The five commands over this deps factory (None: the production one).

    rdma allocates no address: ``make_ipam`` is accepted for the common shape
    and never called.
    """
    return bind(COMMANDS, make_deps or default_deps, make_ipam or _no_ipam)


def _no_ipam(netconf: Mapping[str, Any], env: Mapping[str, str]) -> None:
    return None
