# SPDX-License-Identifier: Apache-2.0
"""Undo an attachment from its record: ``restore``, DEL's kernel side.

Used by DEL (``cni.attach.detach``) and by an ADD that finds a VF a dead pod
left behind (``cni.attach.attach``). Each part is idempotent, so a retried DEL
completes a half-done one. Standard library, the contract modules and
``cni.attach.*`` only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cni.attach.device import host_netdevs
from cni.attach.netdev import (
    find_returned_vf,
    locate_host_netdev,
    rename_in_host,
    restore_link,
    return_to_host,
)
from cni.attach.pf import restore_pf_settings
from cni.attach.routing import remove_routing
from cni.attach.teardown import PodSide, find_pod_side
from cni.errors import CniError
from cni.kernel import KernelError
from cni.record.vf import VfState

if TYPE_CHECKING:
    from cni.deps import Deps

log = logging.getLogger(__name__)


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
