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

Today's layout (``cni.state.cache``): ``<state_dir>/<plugin>/<cid>-<ifname>.json``;
``sriov`` and ``ib-sriov`` hold ``cni.attach.state.VfState`` (its ``stage``
says whether the VF is in the pod), ``rdma`` holds rdma-cni's keys
(``deviceID``, ``containerRdmaDevName``, ``netns``) for the same
(container ID, ifname).

Standard library and ``cni.state.cache`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cni.state.cache import StateCache

VF_PLUGINS = ("sriov", "ib-sriov")
RDMA_PLUGIN = "rdma"
#: Stages of a record whose VF is in the pod: ADD moved it ("moved"), gave it
#: its addresses ("addressed", the last one ADD writes) or finished
#: ("attached"). Earlier ones are an ADD under way; "del-failed",
#: "awaiting-vf", "restored" and "release-pending" belong to a pod on its way out.
IN_POD = frozenset({"moved", "addressed", "attached"})


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


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def pod_nics(state_dir: Path | str) -> list[PodNic]:
    """Every attachment ADD completed, with the RDMA device a chained ``rdma``
    plugin moved for it; sorted by (netns, ifname)."""
    rdma_moved: dict[tuple[str, str], str] = {}
    for rec in StateCache(state_dir, RDMA_PLUGIN).records():
        dev = _text(rec.data, "containerRdmaDevName")
        if dev:
            rdma_moved[(rec.container_id, rec.ifname)] = dev
    nics: list[PodNic] = []
    for plugin in VF_PLUGINS:
        for rec in StateCache(state_dir, plugin).records():
            data = rec.data
            if data.get("stage") not in IN_POD:
                continue
            key = (rec.container_id, rec.ifname)
            nics.append(
                PodNic(
                    container_id=rec.container_id,
                    ifname=rec.ifname,
                    netns=_text(data, "netns"),
                    pod_namespace=_text(data, "pod_namespace"),
                    pod_name=_text(data, "pod_name"),
                    pci=_text(data, "pci"),
                    parent=_text(data, "pf"),
                    rdma_device=_text(data, "rdma_device") or rdma_moved.get(key, ""),
                    netdev=not data.get("dpdk", False),
                )
            )
    nics.sort(key=lambda n: (n.netns, n.ifname))
    return nics
