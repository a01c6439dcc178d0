# SPDX-License-Identifier: Apache-2.0
"""What DEL, GC and CHECK act on: the attachment record, not what DEL is told.

Standard library and the contract modules only.

The runtime's DEL parameters can be wrong in ways real runtimes and operators
produce: a ``CNI_NETNS`` that is another pod's (or a path that no longer
exists) after a runtime's path change, a netconf edited between ADD and DEL
(multus reads the network again at DEL time) that lost its ``ipam``. Acting
on them released addresses still configured on a live pod's VF, or never
released them. So every decision here is taken from the record ADD wrote:

- the VF is taken back from the netns it was moved into, while that netns
  lives (``CNI_NETNS`` only where the recorded one is gone: the same netns
  may be reachable under the runtime's new path); a mismatch is logged;
- a netdev is taken as the VF only with the VF's identity (ifindex or the
  MAC it got in the pod), so a path reused by another netns cannot hand DEL
  somebody else's ``net1``;
- the address is released only once the VF is out of the pod, or its netns
  is proven gone (a dead netns returns a VF to the host, or, for a virtual
  stand-in, destroys it);
- the IPAM that allocated is the record's; without a record, the netconf's,
  else ipamd, asked to release by (container ID, ifname), which is idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cni.kernel import LinkInfo, NetnsNotFound

if TYPE_CHECKING:
    from cni.deps import Deps
    from cni.record.vf import VfState

log = logging.getLogger(__name__)

#: The IPAM asked to release an attachment nothing else names: ipamd.
DEFAULT_IPAM_TYPE = "railyard"


@dataclass(frozen=True, slots=True)
class PodSide:
    """Where DEL found the VF's pod.

    ``netns``: the namespace to take the VF (and our rules) back from, None
    when no live namespace of the attachment is reachable. ``link``: the VF
    in it, None when it is not there. ``recorded_alive``: the netns ADD moved
    the VF into still exists, so the VF may still carry its address there.
    """

    netns: str | None
    link: LinkInfo | None
    recorded_alive: bool


def is_the_vf(link: LinkInfo, st: VfState, recorded_netns: bool) -> bool:
    """Whether ``link`` (named like the pod interface) is the recorded VF."""
    if st.host_ifindex is not None and link.index == st.host_ifindex:
        return True
    if st.pod_mac and link.mac == st.pod_mac:
        return True
    # Moved but not configured yet (ADD died before recording the pod MAC),
    # and the netns move gave it another ifindex: only where ADD moved it.
    return recorded_netns and not st.pod_mac


def _alive(deps: Deps, netns: str) -> bool:
    return bool(netns) and deps.netns.exists(netns)


def find_pod_side(deps: Deps, st: VfState, cni_netns: str) -> PodSide:
    """The netns DEL takes the VF back from (see the module doc)."""
    recorded_alive = _alive(deps, st.netns)
    if cni_netns and cni_netns != st.netns:
        log.warning(
            "DEL of %s/%s: CNI_NETNS %s is not the netns ADD used (%s, %s); "
            "following the record",
            st.container_id,
            st.ifname,
            cni_netns,
            st.netns,
            "alive" if recorded_alive else "gone",
        )
    candidates = [st.netns] if recorded_alive else []
    if cni_netns and cni_netns != st.netns and _alive(deps, cni_netns):
        candidates.append(cni_netns)
    # The host name too: an ADD killed between the move into the pod and the
    # rename there left the VF in the pod under its host name.
    names = [n for n in (st.ifname, st.host_ifname) if n]
    for netns in candidates:
        if st.dpdk:
            break
        for name in names:
            try:
                link = deps.links.find(name, netns)
            except NetnsNotFound:
                break
            if link is not None and is_the_vf(link, st, netns == st.netns):
                if netns != st.netns:
                    log.warning(
                        "VF %s found in %s, not in its recorded netns", st.pci, netns
                    )
                if name != st.ifname:
                    log.warning(
                        "VF %s found in the pod under its host name %s (an ADD "
                        "stopped between the move and the rename)",
                        st.pci,
                        name,
                    )
                return PodSide(netns, link, recorded_alive)
    return PodSide(st.netns if recorded_alive else None, None, recorded_alive)


def may_release(vf_out_of_pod: bool, side: PodSide) -> bool:
    """An address may be released once nothing can still carry it."""
    return vf_out_of_pod or not side.recorded_alive


def ipam_netconf(netconf: Mapping[str, Any], st: VfState | None) -> dict[str, Any]:
    """The netconf whose ``ipam`` section DEL builds its IPAM client from.

    The record's IPAM is the one that allocated, whatever the netconf says
    now; without a record, the netconf's; without either, ipamd's.
    """
    out = dict(netconf)
    if st is not None and st.ipam_type:
        recorded = {**st.ipam_conf, "type": st.ipam_type}
        if netconf.get("ipam") != recorded:
            log.warning(
                "DEL of %s/%s: the netconf's ipam (%s) is not the one that "
                "allocated (%s); releasing through the recorded one",
                st.container_id,
                st.ifname,
                netconf.get("ipam") or "none",
                st.ipam_type,
            )
        out["ipam"] = recorded
        return out
    if st is not None or isinstance(netconf.get("ipam"), Mapping):
        return out  # a record without IPAM: ADD allocated nothing
    out["ipam"] = {"type": DEFAULT_IPAM_TYPE}
    return out
