# SPDX-License-Identifier: Apache-2.0
"""The optional sections of an attachment record: InfiniBand GUIDs and RDMA.

Each is written to disk exactly as the release that introduced it wrote it
(the keys below), so a node upgraded with pods attached reads its old files
as they are: ``IbSection`` is what ib-sriov keeps under ``ib-sriov-guid/``
since 0.1.0, ``RdmaSection`` what the rdma plugin keeps under ``rdma/`` with
rdma-cni's camelCase ``RdmaNetState`` keys.

``network`` is not part of a section's own keys: the cache writes it beside
them (``cni.state.cache``) and ``from_json`` reads it back from there.

Standard library and ``cni.kernel``'s value types only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cni.kernel import PortTos, RoceTosState

#: rdma-cni's ``RdmaNetState.Version``.
RDMA_STATE_VERSION = "1.0"


def _text(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def _optional_text(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) else None


@dataclass(slots=True)
class IbSection:
    """What ib-sriov needs to give a VF its GUIDs and netdev name back.

    It outlives the VF part on purpose: the shared DEL drops that one as soon
    as the netdev is home, and only then may the GUID be restored (a rebind
    while the netdev is in a live pod would pull it out).
    """

    pci: str
    pf: str
    vf_index: int
    pf_pci: str | None = None
    orig_node_guid: str | None = None  # None: unset before ADD
    orig_port_guid: str | None = None
    guid: str = ""  # the GUID ADD set
    pkey: str = ""
    host_ifname: str | None = None  # the netdev's name before ADD
    dpdk: bool = False  # vfio: no netdev comes back after a rebind
    rdma: bool = False  # wait for the RDMA device too after a rebind
    network: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "pci": self.pci,
            "pf": self.pf,
            "pf_pci": self.pf_pci,
            "vf_index": self.vf_index,
            "orig_node_guid": self.orig_node_guid,
            "orig_port_guid": self.orig_port_guid,
            "guid": self.guid,
            "pkey": self.pkey,
            "host_ifname": self.host_ifname,
            "dpdk": self.dpdk,
            "rdma": self.rdma,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> IbSection:
        """Any ``ib-sriov-guid`` record, bookkeeping keys included.

        Raises ValueError when the VF index is missing or not a number: such a
        record names no VF whose GUID could be restored.
        """
        try:
            vf_index = int(obj["vf_index"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"no VF index in the GUID record: {exc}") from exc
        return cls(
            pci=_text(obj, "pci"),
            pf=_text(obj, "pf"),
            vf_index=vf_index,
            pf_pci=_optional_text(obj, "pf_pci"),
            orig_node_guid=_optional_text(obj, "orig_node_guid"),
            orig_port_guid=_optional_text(obj, "orig_port_guid"),
            guid=_text(obj, "guid"),
            pkey=_text(obj, "pkey"),
            host_ifname=_optional_text(obj, "host_ifname"),
            dpdk=bool(obj.get("dpdk", False)),
            rdma=bool(obj.get("rdma", False)),
            network=_text(obj, "network"),
        )


@dataclass(slots=True)
class RdmaSection:
    """The RDMA device the chained rdma plugin moved into the pod."""

    device_id: str  # the VF's PCI address
    container_dev: str  # the device's name in the pod
    sandbox_dev: str = ""  # its name in the host (rdma-cni keeps both)
    netns: str = ""  # the pod's netns, for a DEL with an empty CNI_NETNS
    version: str = RDMA_STATE_VERSION
    network: str = ""
    roce_tos: int | None = None  # the TOS ADD set (roceTos)
    roce_before: RoceTosState | None = None  # what it found, for DEL

    @property
    def device(self) -> str:
        """The device's name: the pod's, else the host's."""
        return self.container_dev or self.sandbox_dev

    @property
    def host_dev(self) -> str:
        """The device's name in the host (before ADD renamed it)."""
        return self.sandbox_dev or self.container_dev

    def to_json(self) -> dict[str, Any]:
        # rdma-cni's RdmaNetState keys, plus the netns DEL needs; the RoCE
        # keys only when ADD set a TOS (older records keep their shape).
        out: dict[str, Any] = {
            "version": self.version,
            "deviceID": self.device_id,
            "sandboxRdmaDevName": self.sandbox_dev,
            "containerRdmaDevName": self.container_dev,
            "netns": self.netns,
        }
        if self.roce_tos is not None:
            out["roceTos"] = self.roce_tos
        if self.roce_before is not None:
            out["roceTosBefore"] = {
                "groupExisted": self.roce_before.group_existed,
                "ports": [
                    {
                        "port": p.port,
                        "roceTos": p.roce_tos,
                        "trafficClass": p.traffic_class,
                        "hasTrafficClass": p.has_traffic_class,
                    }
                    for p in self.roce_before.ports
                ],
            }
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RdmaSection:
        """Any ``rdma`` record (camelCase keys), bookkeeping keys included."""
        return cls(
            device_id=_text(obj, "deviceID"),
            container_dev=_text(obj, "containerRdmaDevName"),
            sandbox_dev=_text(obj, "sandboxRdmaDevName"),
            netns=_text(obj, "netns"),
            version=_text(obj, "version") or RDMA_STATE_VERSION,
            network=_text(obj, "network"),
            roce_tos=_optional_int(obj, "roceTos"),
            roce_before=_roce_before(obj.get("roceTosBefore")),
        )


def _optional_int(obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _roce_before(raw: Any) -> RoceTosState | None:
    if not isinstance(raw, dict):
        return None
    ports = tuple(
        PortTos(
            port=int(p["port"]),
            roce_tos=_optional_int(p, "roceTos"),
            traffic_class=_optional_int(p, "trafficClass"),
            has_traffic_class=bool(p.get("hasTrafficClass", False)),
        )
        for p in raw.get("ports") or []
    )
    return RoceTosState(bool(raw.get("groupExisted", False)), ports)
