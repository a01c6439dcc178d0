# SPDX-License-Identifier: Apache-2.0
"""What ``railyard rails`` prints: a table for people, JSON, or the guide's YAML.

The YAML is what the reference setup asks an operator to write by hand, for
this node: one SriovNetworkNodePolicy per PF that serves a GPU (its
``rootDevices``, ``numVfs``, ``linkType``, ``isRdma``, the PF's vendor and
device IDs), and per rail one SpiderIPPool and one SpiderMultusConfig, whose
chained ``rdma`` plugin names the pod's RDMA device after the rail
(``rdmaDevName``) and, when asked, marks its RoCE traffic (``roceTos``).
``railyard apply -f`` takes it as it is (the policies are for the
sriov-network-operator and are reported and skipped there).
"""

from __future__ import annotations

import json
from typing import Any

from cni.kernel.topology import Affinity
from railyard.rails import Nic, Pairing, Rail

SPIDERPOOL_API = "spiderpool.spidernet.io/v2beta1"
SRIOV_OPERATOR_API = "sriovnetwork.openshift.io/v1"
DEFAULT_NAME_TEMPLATE = "rail{rail}"


def table(pairing: Pairing) -> str:
    """nvidia-smi's GPU x NIC matrix, then the rails, then the notes."""
    host = pairing.host
    nic_cols = [f"NIC{i}" for i in range(len(host.nics))]
    lines = []
    header = ["", *nic_cols, "NUMA", "PCIe root"]
    rows = [header]
    for gpu in host.gpus:
        rows.append(
            [
                f"GPU{gpu.index}",
                *(host.affinity(gpu, n).name for n in host.nics),
                _numa(gpu.place.numa_node),
                gpu.place.pcie_root,
            ]
        )
    lines += _columns(rows)
    lines.append("")
    nic_rows = [["", "PCI", "RDMA", "netdev", "link", "VFs", "NUMA", "PCIe root"]]
    for i, nic in enumerate(host.nics):
        nic_rows.append(
            [
                f"NIC{i}",
                nic.pci,
                nic.rdma_device,
                nic.netdev or "-",
                nic.link_type,
                f"{nic.num_vfs}/{nic.total_vfs}",
                _numa(nic.place.numa_node),
                nic.place.pcie_root,
            ]
        )
    lines += _columns(nic_rows)
    lines.append("")
    rail_rows = [["RAIL", "GPU", "GPU PCI", "NIC", "PF PCI", "RDMA", "AFFINITY"]]
    index = {n.pci: i for i, n in enumerate(host.nics)}
    for rail in pairing.rails:
        rail_rows.append(
            [
                str(rail.number),
                f"GPU{rail.gpu.index}",
                rail.gpu.pci,
                f"NIC{index[rail.nic.pci]}",
                rail.nic.pci,
                rail.nic.rdma_device,
                f"{rail.affinity.name} ({rail.affinity.meaning})",
            ]
        )
    lines += _columns(rail_rows)
    if pairing.notes:
        lines.append("")
        lines += [f"note: {n}" for n in pairing.notes]
    lines.append("")
    lines.append("Legend: " + ", ".join(f"{a.name} {a.meaning}" for a in Affinity))
    return "\n".join(lines) + "\n"


def _numa(node: int | None) -> str:
    return "-" if node is None else str(node)


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def as_json(pairing: Pairing) -> str:
    host = pairing.host

    def place(p: Any) -> dict[str, Any]:
        return {"pci": p.pci, "numaNode": p.numa_node, "pcieRoot": p.pcie_root,
                "path": list(p.path)}  # fmt: skip

    doc = {
        "gpus": [{"index": g.index, **place(g.place)} for g in host.gpus],
        "nics": [
            {
                **place(n.place),
                "rdmaDevice": n.rdma_device,
                "netdev": n.netdev,
                "linkType": n.link_type,
                "totalVfs": n.total_vfs,
                "numVfs": n.num_vfs,
            }
            for n in host.nics
        ],
        "affinity": {
            g.pci: {n.pci: host.affinity(g, n).name for n in host.nics}
            for g in host.gpus
        },
        "rails": [
            {
                "rail": r.number,
                "gpu": r.gpu.pci,
                "nic": r.nic.pci,
                "rdmaDevice": r.nic.rdma_device,
                "affinity": r.affinity.name,
            }
            for r in pairing.rails
        ],
        "notes": pairing.notes,
    }
    return json.dumps(doc, indent=2) + "\n"


def documents(
    pairing: Pairing,
    node: str,
    namespace: str = "spiderpool",
    num_vfs: int | None = None,
    name_template: str = DEFAULT_NAME_TEMPLATE,
    roce_tos: int | None = None,
) -> list[dict[str, Any]]:
    """The policies, pools and networks for this node's rails, in apply order."""
    out: list[dict[str, Any]] = []
    policy_rail: dict[str, Rail] = {}
    for rail in pairing.rails:
        if rail.nic.pci in policy_rail:
            continue
        policy_rail[rail.nic.pci] = rail
        out.append(_policy(rail, node, namespace, num_vfs))
    for rail in pairing.rails:
        owner = policy_rail[rail.nic.pci]
        out.append(_pool(rail))
        out.append(_network(rail, owner, namespace, name_template, roce_tos))
    return out


def _resource(rail: Rail) -> str:
    return f"gpu{rail.number}sriov"


def _policy(
    rail: Rail, node: str, namespace: str, num_vfs: int | None
) -> dict[str, Any]:
    nic: Nic = rail.nic
    vfs = num_vfs or nic.num_vfs or nic.total_vfs
    return {
        "apiVersion": SRIOV_OPERATOR_API,
        "kind": "SriovNetworkNodePolicy",
        "metadata": {"name": f"gpu{rail.number}-nic-{node}", "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceName": _resource(rail),
            "priority": 99,
            "numVfs": vfs,
            "nicSelector": {
                "vendor": nic.vendor,
                "deviceID": nic.device,
                "rootDevices": [nic.pci],
            },
            "linkType": nic.link_type,
            "deviceType": "netdevice",
            "isRdma": True,
        },
    }


def _pool(rail: Rail) -> dict[str, Any]:
    octet = 10 + rail.number
    return {
        "apiVersion": SPIDERPOOL_API,
        "kind": "SpiderIPPool",
        "metadata": {"name": f"gpu{rail.number}-net{octet}"},
        "spec": {
            "subnet": f"172.16.{octet}.0/24",
            "ips": [f"172.16.{octet}.1-172.16.{octet}.200"],
            "gateway": f"172.16.{octet}.254",
        },
    }


def _network(
    rail: Rail,
    owner: Rail,
    namespace: str,
    name_template: str,
    roce_tos: int | None,
) -> dict[str, Any]:
    pools = {"ipv4": [f"gpu{rail.number}-net{10 + rail.number}"]}
    spec: dict[str, Any]
    if rail.nic.link_type == "ib":
        # ib-sriov moves the RDMA device itself; the rdma plugin cannot follow.
        spec = {
            "cniType": "ib-sriov",
            "ibsriov": {
                "resourceName": f"spidernet.io/{_resource(owner)}",
                "ippools": pools,
            },
        }
    else:
        rdma: dict[str, Any] = {
            "type": "rdma",
            "rdmaDevName": name_template.replace("{rail}", str(rail.number)),
        }
        if roce_tos is not None:
            rdma["roceTos"] = roce_tos
        spec = {
            "cniType": "sriov",
            "sriov": {
                "resourceName": f"spidernet.io/{_resource(owner)}",
                "ippools": pools,
            },
            "chainCNIJsonData": [json.dumps(rdma, separators=(",", ":"))],
        }
    return {
        "apiVersion": SPIDERPOOL_API,
        "kind": "SpiderMultusConfig",
        "metadata": {"name": f"gpu{rail.number}-sriov", "namespace": namespace},
        "spec": spec,
    }
