# SPDX-License-Identifier: Apache-2.0
"""A node with RDMA NICs on disk, for the exporter's tests and benchmark.

A fake sysfs (``railyard_sim.pci_tree``) with hw_counters files and GUIDs,
attachment records written by the plugins' own record writers, netns "paths"
that are plain files (the exporter only checks that they exist), and an
in-memory ``NetdevStatsSource``. No root, no kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cni.exporter import names
from cni.exporter.collector import RdmaCollector
from cni.exporter.owners import OwnerLabels
from cni.kernel.stats import NetdevStats, SysfsRdmaStats
from cni.kernel.sysfs import Sysfs
from cni.plugins.rdma.commands import _section as rdma_section
from cni.record.store import AttachmentRecords
from cni.record.vf import VfState
from railyard_sim.pci_tree import PciTree

NODE = "node-a"


def guid(n: int) -> str:
    raw = f"{n:016x}"
    return ":".join(raw[i : i + 4] for i in range(0, 16, 4))


@dataclass
class FakeNetdevs:
    """``NetdevStatsSource`` from a dict; ``calls`` counts reads per netns."""

    stats: dict[tuple[str | None, str], NetdevStats] = field(default_factory=dict)
    calls: list[str | None] = field(default_factory=list)

    def read(self, netns: str | None, ifnames: Sequence[str]) -> dict[str, NetdevStats]:
        self.calls.append(netns)
        return {n: self.stats[(netns, n)] for n in ifnames if (netns, n) in self.stats}


def mlx5_stats(rx_bytes: int = 0, **extra: int) -> dict[str, int]:
    """ethtool statistics shaped like an mlx5 VF's (vport and per priority)."""
    stats = {n: 0 for n in names.VPORT_COUNTERS}
    stats["rx_vport_rdma_unicast_bytes"] = rx_bytes
    for prio in range(8):
        for d in ("rx", "tx"):
            for kind in ("pause", "discards"):
                stats[f"{d}_prio{prio}_{kind}"] = 0
    stats["rx_packets_phy"] = 5  # not a vport statistic: not exported
    stats.update(extra)
    return stats


class RdmaNode:
    """The builder; every method states one fact about the node."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tree = PciTree(root / "sys")
        self.state_dir = root / "state"
        self.netns_dir = root / "run" / "containerd" / "netns"
        self.netns_dir.mkdir(parents=True)
        self.netdevs = FakeNetdevs()
        self._pfs: dict[str, tuple[int, str]] = {}  # pci -> (rail, netdev)

    def rdma_device(
        self,
        pci: str,
        dev: str,
        node_guid: str,
        image_guid: str,
        counters: dict[str, int] | None = None,
        tclass: int | None = None,
    ) -> Path:
        path = self.tree.rdma(pci, dev)
        (path / "node_guid").write_text(node_guid + "\n")
        (path / "sys_image_guid").write_text(image_guid + "\n")
        hw = path / "ports" / "1" / "hw_counters"
        hw.mkdir(parents=True, exist_ok=True)
        values = {n: 0 for n in names.HW_COUNTERS}
        values.update(counters or {})
        for name, value in values.items():
            (hw / name).write_text(f"{value}\n")
        (hw / "lifespan").write_text("12\n")
        if tclass is not None:
            tc = path / "tc" / "1"
            tc.mkdir(parents=True, exist_ok=True)
            (tc / "traffic_class").write_text(f"Global tclass={tclass}\n")
        return path

    def pf(self, rail: int, numvfs: int = 2, tclass: int | None = 106) -> str:
        pci = f"0000:{rail:02x}:00.0"
        netdev = f"ens{rail}f0"
        self.tree.pf(pci, netdev, numvfs=numvfs)
        self.rdma_device(
            pci, f"mlx5_{rail * 100}", guid(rail << 16), guid(rail << 16), tclass=tclass
        )
        self._pfs[pci] = (rail, netdev)
        self.netdevs.stats[(None, netdev)] = NetdevStats(mlx5_stats(), 200000)
        return pci

    def netns(self, name: str) -> str:
        path = self.netns_dir / name
        path.touch()
        return str(path)

    def pod_nic(
        self,
        pf_pci: str,
        vf_index: int,
        pod: str,
        ifname: str = "net1",
        namespace: str = "team-a",
        netns: str | None = None,
        counters: dict[str, int] | None = None,
        stats: dict[str, int] | None = None,
        isolation: bool = True,
        chained_rdma: bool = False,
        stage: str = "addressed",
        with_rdma: bool = True,
    ) -> VfState:
        """A VF attached to ``pod`` as ADD records it (sriov record, and the
        chained rdma plugin's record when ``chained_rdma``)."""
        rail, pf_netdev = self._pfs[pf_pci]
        pci = f"0000:{rail:02x}:{(2 + vf_index) // 8:02x}.{(2 + vf_index) % 8}"
        self.tree.vf(pf_pci, vf_index, pci, None)
        dev = f"mlx5_{rail * 100 + 1 + vf_index}"
        if with_rdma:
            self.rdma_device(
                pci, dev, guid((rail << 16) + 1 + vf_index), guid(rail << 16), counters
            )
        netns = netns or self.netns(f"cni-{pod}")
        cid = f"cid-{pod}"
        st = VfState(
            container_id=cid,
            ifname=ifname,
            network=f"gpu{rail}",
            netns=netns,
            pci=pci,
            pf=pf_netdev,
            vf_index=vf_index,
            pod_namespace=namespace,
            pod_name=pod,
            rdma_device=dev if isolation and not chained_rdma and with_rdma else None,
            stage=stage,
        )
        records = AttachmentRecords(self.state_dir)
        records.vf("sriov").save(st)
        if chained_rdma:
            records.save_rdma(cid, ifname, rdma_section(pci, dev, netns, st.network))
        self.netdevs.stats[(netns, ifname)] = NetdevStats(
            mlx5_stats(**(stats or {})), 100000
        )
        return st

    def delete_record(self, st: VfState) -> None:
        AttachmentRecords(self.state_dir).vf("sriov").delete(st.container_id, st.ifname)

    def collector(self, owners: OwnerLabels | None = None) -> RdmaCollector:
        return RdmaCollector(
            state_dir=self.state_dir,
            sysfs=Sysfs(self.root / "sys"),
            rdma=SysfsRdmaStats(self.root / "sys"),
            netdev=self.netdevs,
            node=NODE,
            owners=owners,
        )
