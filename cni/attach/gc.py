# SPDX-License-Identifier: Apache-2.0
"""GC of the VF lifecycle shared by sriov and ib-sriov: ``gc``.

DELs every recorded attachment of a network the runtime no longer lists
(``cni.attach.detach``), then lets the IPAM collect its own leftovers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from cni.attach.detach import DetachRequest, detach
from cni.errors import CniError
from cni.ipam import Attachment, IpamClient, IpamError
from cni.record.vf import VfState

if TYPE_CHECKING:
    from cni.deps import Deps


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
