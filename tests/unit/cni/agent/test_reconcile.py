# SPDX-License-Identifier: Apache-2.0
"""The node reconcile's decisions (``cni.agent.reconcile``) over real records
in a temp state dir, with the node (netns, host links, runtime) and the
plugins' DEL played by the test."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cni.agent import reconcile_metrics
from cni.agent.reconcile import (
    Judge,
    Reconciler,
    ReconcileSettings,
    del_requests,
    lock_keys,
)
from cni.agent.server import PluginEntry
from cni.errors import DEVICE_ERROR, CniError
from cni.kernel import LinkInfo
from cni.record.sections import IbSection, RdmaSection
from cni.record.store import Attachment, AttachmentRecords
from cni.record.vf import Stage, VfState
from cni.skel import CmdArgs, PluginFuncs
from cni.state.locks import Locks

PCI = "0000:af:00.2"
POD = "/var/run/netns/pod-a"


def vf_state(
    cid: str = "c1", pci: str = PCI, netns: str = POD, **kw: object
) -> VfState:
    base: dict[str, object] = {
        "container_id": cid,
        "ifname": "net1",
        "network": "gpu1-sriov",
        "netns": netns,
        "pci": pci,
        "host_ifname": "enp175s0f0v2",
        "host_ifindex": 17,
        "pod_mac": "02:00:00:00:00:02",
        "ipam_type": "spiderpool",
        "ipam_conf": {"default_ipv4_ippool": ["gpu1-net11"]},
        "stage": Stage.ADDRESSES_RECORDED,
    }
    base.update(kw)
    return VfState(**base)  # type: ignore[arg-type]


def link(name: str, index: int, mac: str) -> LinkInfo:
    return LinkInfo(index=index, name=name, mac=mac, mtu=1500, up=False)


def _no_add(ca: CmdArgs) -> None:
    raise AssertionError("the reconcile never adds")


class FakeNode:
    """Which netns exist, which links the host has, the DELs run."""

    def __init__(self, records: AttachmentRecords) -> None:
        self.netns: set[str] = {POD}
        self.host: dict[str, LinkInfo] = {}
        self.deleted: list[tuple[str, str, dict[str, object]]] = []
        self.fail: str = ""
        self.records = records

    def table(self) -> dict[str, PluginEntry]:
        def entry(cni_type: str) -> PluginEntry:
            def del_(ca: CmdArgs) -> None:
                if self.fail == cni_type:
                    raise CniError(DEVICE_ERROR, "the VF would not come home")
                self.deleted.append((cni_type, ca.container_id, dict(ca.netconf)))
                if cni_type == "rdma":
                    self.records.delete_rdma(ca.container_id, ca.ifname)
                else:
                    self.records.vf(cni_type).delete(ca.container_id, ca.ifname)

            return PluginEntry(
                lambda: PluginFuncs(add=_no_add, del_=del_), cni_type, cni_type
            )

        return {t: entry(t) for t in ("sriov", "ib-sriov", "rdma")}


@pytest.fixture
def node(tmp_path: Path) -> FakeNode:
    return FakeNode(AttachmentRecords(tmp_path))


def reconciler(tmp_path: Path, node: FakeNode, **settings: object) -> Reconciler:
    return Reconciler(
        node.table(),
        tmp_path,
        {"PATH": "/usr/bin:/bin"},
        ReconcileSettings(report_to_ipamd=False, **settings),  # type: ignore[arg-type]
        netns_exists=lambda path: path in node.netns,
        host_link=lambda name: node.host.get(name),
    )


def test_an_attachment_whose_netns_is_gone_is_deleted_as_the_runtime_would(
    tmp_path: Path, node: FakeNode
) -> None:
    node.records.vf("sriov").save(vf_state(netns="/var/run/netns/gone"))
    node.records.vf("sriov").save(vf_state("c2"))
    report = reconciler(tmp_path, node).run_pass()
    assert report.repaired == [("c1", "net1", "netns-gone")]
    assert [(t, cid) for t, cid, _ in node.deleted] == [("sriov", "c1")]
    # The DEL's netconf names the record's network, VF and IPAM.
    conf = node.deleted[0][2]
    assert (conf["name"], conf["type"], conf["deviceID"]) == (
        "gpu1-sriov",
        "sriov",
        PCI,
    )
    assert conf["ipam"] == {"type": "spiderpool", "default_ipv4_ippool": ["gpu1-net11"]}
    assert [s.container_id for s in node.records.vf("sriov").all()] == ["c2"]
    stats = reconcile_metrics.ReconcileStats.load(
        tmp_path / reconcile_metrics.STATS_FILE
    )
    assert stats.repairs == {"netns-gone": 1} and stats.last_pass_timestamp > 0


def test_a_chain_is_deleted_last_plugin_first() -> None:
    att = Attachment(
        "c1",
        "net1",
        vf=vf_state(),
        vf_plugin="sriov",
        rdma=RdmaSection(
            device_id=PCI,
            container_dev="mlx5_3",
            sandbox_dev="mlx5_3",
            netns=POD,
            network="gpu1-sriov",
        ),
    )
    assert [t for t, _ in del_requests(att)] == ["rdma", "sriov"]
    assert lock_keys(att) == [PCI]


def test_ib_sriov_takes_its_pf_lock_before_the_vfs_as_its_plugin_does() -> None:
    ib = IbSection(pci=PCI, pf="ib0", vf_index=2, pf_pci="0000:af:00.0")
    att = Attachment("c1", "net1", vf=vf_state(), vf_plugin="ib-sriov", ib=ib)
    assert lock_keys(att) == ["ib-pf-0000:af:00.0", PCI]
    # Only the IB section left (the VF part went with a DEL): its GUID still
    # goes back through ib-sriov's DEL.
    assert [t for t, _ in del_requests(Attachment("c1", "net1", ib=ib))] == ["ib-sriov"]


def test_a_vf_in_the_host_under_its_pod_name_is_gone_only_with_its_identity() -> None:
    st = vf_state()
    host = {"net1": link("net1", 99, "aa:bb:cc:dd:ee:ff")}
    judge = Judge(lambda p: True, host.get, None, 60.0)
    att = Attachment("c1", "net1", vf=st, vf_plugin="sriov")
    assert judge.verdict(att, 1.0) is None  # another host link named net1
    host["net1"] = link("net1", 99, st.pod_mac or "")
    finding = judge.verdict(att, 1.0)
    assert finding is not None and finding.what == "vf-in-host"
    home = Attachment("c1", "net1", vf=vf_state(stage=Stage.RELEASE_PENDING))
    assert judge.verdict(home, 1.0) is None  # its VF is home already


def test_a_sandbox_the_runtime_lost_is_gone_only_once_the_record_is_old() -> None:
    pod = vf_state(pod_namespace="default", pod_name="trainer-0")
    att = Attachment("c1", "net1", vf=pod, vf_plugin="sriov")
    judge = Judge(lambda p: True, lambda n: None, frozenset({"other"}), 60.0)
    # Young: the runtime registers a sandbox only after its CNI chain ran.
    assert judge.verdict(att, 5.0) is None
    finding = judge.verdict(att, 61.0)
    assert finding is not None and finding.what == "sandbox-gone"
    known = Judge(lambda p: True, lambda n: None, frozenset({"c1"}), 60.0)
    assert known.verdict(att, 1000.0) is None
    without_runtime = Judge(lambda p: True, lambda n: None, None, 60.0)
    assert without_runtime.verdict(att, 1000.0) is None
    # Not a Kubernetes pod's (podman's, no K8S_POD_NAME): the CRI never knew it.
    podman = Attachment("c1", "net1", vf=vf_state(), vf_plugin="sriov")
    assert judge.verdict(podman, 1000.0) is None


HOLDER = """
import sys
from cni.state.locks import Locks
lock = Locks(sys.argv[1]).lock(sys.argv[2]).acquire()
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def plugin_holding(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process (an ADD or DEL in flight) holding the VF's lock."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), PCI],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_an_attachment_whose_add_or_del_is_in_flight_is_left_alone(
    tmp_path: Path, node: FakeNode, plugin_holding: subprocess.Popen[str]
) -> None:
    node.records.vf("sriov").save(vf_state(netns="/var/run/netns/gone"))
    report = reconciler(tmp_path, node).run_pass()
    assert report.busy == [("c1", "net1")] and node.deleted == []
    assert plugin_holding.stdin is not None
    plugin_holding.stdin.close()
    plugin_holding.wait()
    report = reconciler(tmp_path, node).run_pass()
    assert report.repaired == [("c1", "net1", "netns-gone")]


def test_the_dels_lock_is_the_passes_while_it_runs(
    tmp_path: Path, node: FakeNode
) -> None:
    """The DEL takes the same lock the pass holds: lent, not waited for."""
    node.records.vf("sriov").save(vf_state(netns="/var/run/netns/gone"))
    took: list[bool] = []
    table = node.table()
    inner = table["sriov"].funcs

    def del_(ca: CmdArgs) -> None:
        with Locks(tmp_path).lock(PCI, timeout=0) as lock:
            took.append(lock.held)
        inner().del_(ca)

    table["sriov"] = PluginEntry(
        lambda: PluginFuncs(add=_no_add, del_=del_), "sriov", "sriov"
    )
    rec = reconciler(tmp_path, node)
    rec.table = table
    assert rec.run_pass().repaired and took == [True]


def test_a_pass_repairs_at_most_its_bound_and_the_next_pass_the_rest(
    tmp_path: Path, node: FakeNode
) -> None:
    for n in range(5):
        node.records.vf("sriov").save(
            vf_state(f"c{n}", pci=f"0000:af:00.{n + 2}", netns="/var/run/netns/gone")
        )
    first = reconciler(tmp_path, node, max_repairs=3).run_pass()
    assert (len(first.repaired), first.deferred) == (3, 2)
    second = reconciler(tmp_path, node, max_repairs=3).run_pass()
    assert (len(second.repaired), second.deferred) == (2, 0)
    assert node.records.vf("sriov").all() == []


def test_a_failed_del_keeps_the_record_counts_a_failure_and_is_retried(
    tmp_path: Path, node: FakeNode
) -> None:
    node.records.vf("sriov").save(vf_state(netns="/var/run/netns/gone"))
    node.fail = "sriov"
    report = reconciler(tmp_path, node).run_pass()
    assert report.failed == [("c1", "net1", "netns-gone")]
    assert node.records.vf("sriov").load("c1", "net1") is not None
    node.fail = ""
    assert reconciler(tmp_path, node).run_pass().repaired
    stats = reconcile_metrics.ReconcileStats.load(
        tmp_path / reconcile_metrics.STATS_FILE
    )
    assert (stats.repairs, stats.failures) == ({"netns-gone": 1}, {"netns-gone": 1})


def test_the_metrics_families_read_the_passes_counts(tmp_path: Path) -> None:
    stats = reconcile_metrics.ReconcileStats(
        repairs={"netns-gone": 2, "vf-in-host": 1},
        last_pass_timestamp=1700000000.0,
        last_pass_seconds=0.25,
    )
    stats.save(tmp_path / reconcile_metrics.STATS_FILE)
    text = reconcile_metrics.render(reconcile_metrics.registry(tmp_path)).decode()
    assert 'railyard_reconcile_repairs_total{what="netns-gone"} 2.0' in text
    assert 'railyard_reconcile_repairs_total{what="vf-in-host"} 1.0' in text
    assert "railyard_reconcile_last_pass_timestamp_seconds 1.7e+09" in text
    assert "railyard_reconcile_last_pass_duration_seconds 0.25" in text


def test_no_stats_file_yet_reads_as_zero(tmp_path: Path) -> None:
    text = reconcile_metrics.render(reconcile_metrics.registry(tmp_path)).decode()
    assert "railyard_reconcile_last_pass_timestamp_seconds 0.0" in text
    (tmp_path / reconcile_metrics.STATS_FILE).parent.mkdir(parents=True)
    (tmp_path / reconcile_metrics.STATS_FILE).write_text(json.dumps({"repairs": 3}))
    assert (
        reconcile_metrics.ReconcileStats.load(tmp_path / reconcile_metrics.STATS_FILE)
        == reconcile_metrics.ReconcileStats()
    )


def test_each_plugin_takes_the_dels_netconf_the_reconcile_builds() -> None:
    """What ``del_requests`` hands each plugin passes its own config loader
    (a DEL needs no prevResult and no deviceID, but gets them)."""
    import io

    from cni.plugins.ib_sriov.config import load_conf as ib_sriov_conf
    from cni.plugins.rdma.config import load_conf as rdma_conf
    from cni.plugins.sriov.config import load_conf as sriov_conf
    from cni.skel import run_plugin

    loaders = {"sriov": sriov_conf, "ib-sriov": ib_sriov_conf, "rdma": rdma_conf}
    # A section from before sections kept their network names none.
    rdma = RdmaSection(
        device_id=PCI, container_dev="mlx5_3", sandbox_dev="mlx5_3", netns=POD
    )
    ib = IbSection(pci=PCI, pf="ib0", vf_index=2, network="gpu1-ib")
    requests = del_requests(
        Attachment("c1", "net1", vf=vf_state(), vf_plugin="sriov", rdma=rdma)
    ) + del_requests(Attachment("c2", "net1", ib=ib))
    assert [t for t, _ in requests] == ["rdma", "sriov", "ib-sriov"]
    loaded: list[str] = []
    for cni_type, netconf in requests:
        out = io.StringIO()

        def delete(ca: CmdArgs, cni_type: str = cni_type) -> None:
            loaders[cni_type](ca)
            loaded.append(cni_type)

        code = run_plugin(
            PluginFuncs(add=_no_add, del_=delete),
            cni_type,
            env={
                "CNI_COMMAND": "DEL",
                "CNI_CONTAINERID": "c1",
                "CNI_NETNS": "",
                "CNI_IFNAME": "net1",
                "CNI_PATH": "/opt/cni/bin",
            },
            stdin=io.BytesIO(json.dumps(netconf).encode()),
            stdout=out,
            stderr=io.StringIO(),
        )
        assert code == 0, out.getvalue()
    assert loaded == ["rdma", "sriov", "ib-sriov"]


def test_the_agent_reconciles_unless_told_not_to(tmp_path: Path) -> None:
    from cni.agent.cli import main, parse_args, reconciler

    table = FakeNode(AttachmentRecords(tmp_path)).table()
    on = parse_args(["--state-dir", str(tmp_path), "--cri-socket", ""])
    assert (on.reconcile_interval, on.reconcile_max_repairs) == (60.0, 16)
    assert callable(reconciler(on, table))
    off = parse_args(["--reconcile-interval", "0"])
    assert reconciler(off, table) is None
    assert main(["--reconcile-interval", "-1"]) == 2
    assert main(["--reconcile-max-repairs", "0"]) == 2
