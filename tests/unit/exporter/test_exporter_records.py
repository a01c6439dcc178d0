# SPDX-License-Identifier: Apache-2.0
"""What ADD records about the pod, and the ethtool and HTTP edges."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pyroute2.ethtool import ioctl as pyroute2_ethtool

from cni.attach.commands import attach_spec
from cni.exporter.records import pod_nics
from cni.exporter.server import register, serve
from cni.kernel.ethtool import EthtoolStats, read_netdev
from cni.plugins.sriov.config import load_conf
from cni.record.store import AttachmentRecords
from cni.record.vf import PfSettings, VfState
from cni.skel import CmdArgs
from tests.doubles.rdma_node import RdmaNode


def test_add_records_the_pod_from_cni_args_and_the_exporter_reads_it(
    tmp_path: Path,
) -> None:
    conf = {
        "cniVersion": "1.0.0",
        "name": "gpu1",
        "type": "sriov",
        "deviceID": "0000:af:06.0",
    }
    args = CmdArgs(
        command="ADD",
        container_id="c1",
        netns="/run/containerd/netns/cni-1",
        ifname="net1",
        args="IgnoreUnknown=true;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=trainer-0",
        path=[],
        stdin_data=json.dumps(conf).encode(),
        netconf=conf,
        env={},
    )
    spec = attach_spec("sriov", args, load_conf(args), PfSettings())
    assert (spec.pod_namespace, spec.pod_name) == ("team-a", "trainer-0")
    st = VfState(
        container_id=spec.container_id,
        ifname=spec.ifname,
        network=spec.network,
        netns=spec.netns,
        pci=spec.pci,
        pf="ens1f0",
        pod_namespace=spec.pod_namespace,
        pod_name=spec.pod_name,
        stage="addressed",
    )
    AttachmentRecords(tmp_path).vf("sriov").save(st)
    [nic] = pod_nics(tmp_path)
    assert (nic.pod_namespace, nic.pod_name, nic.netns, nic.pci, nic.parent) == (
        "team-a",
        "trainer-0",
        "/run/containerd/netns/cni-1",
        "0000:af:06.0",
        "ens1f0",
    )


def test_pyroute2_ethtool_requests_are_the_uapi_numbers() -> None:
    # linux/sockios.h and linux/ethtool.h: what the adapter relies on.
    assert pyroute2_ethtool.SIOCETHTOOL == 0x8946
    assert pyroute2_ethtool.ETHTOOL_GSTATS == 0x1D
    assert pyroute2_ethtool.ETHTOOL_GSTRINGS == 0x1B
    assert pyroute2_ethtool.ETHTOOL_GSSET_INFO == 0x37
    assert pyroute2_ethtool.ETHTOOL_GSET == 0x1
    assert pyroute2_ethtool.ETH_SS_STATS == 1


class FakeHandle:
    """An ethtool handle whose ioctls answer from a table, as pyroute2's
    ``IoctlEthtool`` does: names through GSSET_INFO + GSTRINGS (counted),
    values through GSTATS for the names in ``stat_names``."""

    def __init__(self, table: dict[str, list[tuple[str, int]]]) -> None:
        self.table = table
        self.ifname = ""
        self.stat_names: list[str] | None = None
        self.gstrings = 0
        self.closed = False

    def _rows(self) -> list[tuple[str, int]]:
        if self.ifname not in self.table:
            raise pyroute2_ethtool.NoSuchDevice(self.ifname)
        return self.table[self.ifname]

    def change_ifname(self, name: str) -> None:
        self.ifname, self.stat_names = name, None

    def get_stringset_length(self, set_id: int) -> int:
        return len(self._rows())

    def get_stringset(self, set_id: int) -> list[str]:
        self.gstrings += 1
        return [name for name, _ in self._rows()]

    def get_statistics(self) -> list[tuple[str, int]]:
        if not self.stat_names:
            self.stat_names = self.get_stringset(pyroute2_ethtool.ETH_SS_STATS)
        return list(zip(self.stat_names, (v for _, v in self._rows()), strict=True))

    def get_cmd(self) -> SimpleNamespace:
        return SimpleNamespace(speed=0x0D40, speed_hi=0x3)

    def close(self) -> None:
        self.closed = True


def test_ethtool_names_are_fetched_again_only_when_their_count_changes() -> None:
    table = {"net1": [("rx_vport_rdma_unicast_bytes", 5)]}
    handles: list[FakeHandle] = []

    def factory() -> FakeHandle:
        handles.append(FakeHandle(table))
        return handles[-1]

    source = EthtoolStats(factory)
    source.read(None, ["net1"])
    table["net1"] = [("rx_vport_rdma_unicast_bytes", 9)]
    assert source.read(None, ["net1"])["net1"].stats == {
        "rx_vport_rdma_unicast_bytes": 9
    }
    table["net1"] = [("rx_vport_rdma_unicast_bytes", 10), ("tx_prio0_pause", 1)]
    assert source.read(None, ["net1"])["net1"].stats == {
        "rx_vport_rdma_unicast_bytes": 10,
        "tx_prio0_pause": 1,
    }
    assert [h.gstrings for h in handles] == [1, 0, 1]


def test_ethtool_reads_every_netdev_on_one_handle_and_closes_it() -> None:
    handle = FakeHandle({"net1": [("rx_vport_rdma_unicast_bytes", 5)]})
    got = EthtoolStats(lambda: handle).read(None, ["net1", "missing"])
    assert list(got) == ["net1"]
    assert got["net1"].stats == {"rx_vport_rdma_unicast_bytes": 5}
    assert got["net1"].speed_mbps == 200000
    assert handle.closed


def test_ethtool_of_a_vanished_netns_reads_nothing(tmp_path: Path) -> None:
    handle = FakeHandle({})
    assert EthtoolStats(lambda: handle).read(str(tmp_path / "gone"), ["net1"]) == {}


def test_read_netdev_keeps_driver_names() -> None:
    stats = read_netdev(FakeHandle({"eth9": [("tx_prio3_pause", 2)]}), "eth9")
    assert stats.stats == {"tx_prio3_pause": 2}


def test_collector_mounts_on_any_registry_and_serves_metrics(tmp_path: Path) -> None:
    node = RdmaNode(tmp_path)
    node.pod_nic(node.pf(1), 0, "trainer-0")
    collector = node.collector()
    registry = CollectorRegistry()
    register(registry, collector)
    via_registry = parse(generate_latest(registry).decode())
    server = serve("127.0.0.1:0", collector.render)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            served = parse(reply.read().decode())
    finally:
        server.stop()
    assert any(k[:2] == ("rdma_out_of_sequence_total", "trainer-0") for k in served)
    # The direct rendering is the registry's exposition, series for series
    # (but the scrape's own duration).
    duration = "railyard_exporter_scrape_duration_seconds"
    assert {k: v for k, v in served.items() if k[0] != duration} == {
        k: v for k, v in via_registry.items() if k[0] != duration
    }


def parse(text: str) -> dict[tuple[str, str, str], float]:
    """(sample name, pod, all labels) -> value, through prometheus_client's
    own parser (so the rendered text must be valid exposition format)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, s.labels.get("pod_name", ""), str(sorted(s.labels.items())))
            out[key] = s.value
    return out
