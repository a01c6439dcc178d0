# SPDX-License-Identifier: Apache-2.0
"""The pods' RDMA NICs, read from the plugins' own attachment records.

This is the only module of the exporter that knows how ADD records an
attachment; everything else sees ``PodNic``. When the record format changes,
this file changes and nothing else.

Why records and not what Spiderpool does (enter every netns under
``/var/run/netns``, run ``ip route get 1.0.0.0``, look the source address up
among ``status.podIPs``): the record names the pod (CNI_ARGS
``K8S_POD_NAMESPACE``/``K8S_POD_NAME``), its netns path wherever the runtime
put it, the VF's PCI address and the RDMA device, so the mapping holds with
``podDefaultRouteNIC`` on an RDMA NIC, in shared RDMA mode and for netns
paths outside ``/var/run/netns``. DEL deletes the record, so a device whose
pod is gone stops being exported.

The records come through ``cni.record.store.AttachmentRecords``, the typed
API the plugins write them with: the VF part (its ``stage`` says whether the
VF is in the pod) and, for a chained ``rdma`` plugin, the RDMA section of the
same (container ID, ifname).

Standard library and ``cni.record`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cni.record.store import AttachmentRecords
from cni.record.vf import Stage

#: Stages of a record whose VF is in the pod (the last one an ADD writes is
#: one of them). An earlier one is an ADD under way; the DEL stages belong to
#: a pod on its way out.
IN_POD = frozenset({Stage.NETDEV_IN_POD, Stage.ADDRESSES_RECORDED})


@dataclass(frozen=True, slots=True)
class PodNic:
    """One VF a pod holds, as the exporter needs it."""

    container_id: str
    ifname: str  # the netdev's name in the pod
    netns: str  # the pod's netns path, as the runtime gave it
    pod_namespace: str
    pod_name: str
    pci: str
    parent: str  # the PF's netdev ("" when unknown)
    rdma_device: str  # the name ADD recorded ("" when ADD moved none)
    netdev: bool = True  # False for a DPDK VF: no kernel netdev to read


def pod_nics(state_dir: Path | str) -> list[PodNic]:
    """Every attachment ADD completed, with the RDMA device a chained ``rdma``
    plugin moved for it; sorted by (netns, ifname)."""
    nics: list[PodNic] = []
    for att in AttachmentRecords(state_dir).all():
        st = att.vf
        if st is None or st.stage not in IN_POD:
            continue
        chained = att.rdma.container_dev if att.rdma else ""
        nics.append(
            PodNic(
                container_id=att.container_id,
                ifname=att.ifname,
                netns=st.netns,
                pod_namespace=st.pod_namespace,
                pod_name=st.pod_name,
                pci=st.pci,
                parent=st.pf or "",
                rdma_device=st.rdma_device or chained,
                netdev=not st.dpdk,
            )
        )
    nics.sort(key=lambda n: (n.netns, n.ifname))
    return nics
