# SPDX-License-Identifier: Apache-2.0
"""DEL of the VF lifecycle shared by sriov and ib-sriov: ``detach``.

Restores from the record whatever ADD recorded (``cni.attach.restore``), each
part idempotently, then releases the address; the record is deleted only when
everything succeeded. Standard library, the contract modules and
``cni.attach.*`` only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cni.attach.allocation import Allocations
from cni.attach.restore import restore
from cni.errors import DEVICE_ERROR, TRY_AGAIN_LATER, CniError
from cni.ipam import IpamClient, IpamError
from cni.record.store import VfRecords
from cni.record.vf import Stage, VfState
from cni.state.locks import Locks

if TYPE_CHECKING:
    from cni.deps import Deps

log = logging.getLogger(__name__)


class ReleasePending(CniError):
    """DEL restored the VF but the release failed (code 11 when ipamd is
    unreachable): only a minimal record (stage ``release-pending``) is kept,
    for the runtime's DEL retry or GC."""


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
            st.advance(Stage.RESTORE_FAILED)
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
            st.advance(Stage.VF_OUT_OF_REACH)
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
