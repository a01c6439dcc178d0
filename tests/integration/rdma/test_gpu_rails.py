# SPDX-License-Identifier: Apache-2.0
"""GPU-affine rails end to end, as an operator runs them on two DGX-like nodes.

Each simulated node has the ``dgx`` shape (8 GPUs and 8 NICs behind 4 PCIe
switches on 2 sockets). On each: ``railyard rails -o yaml`` writes the
node's policies, pools and networks; ``railyard apply`` takes them (pools to
the node's ipamd, networks to conflists, each network's VF pinned with
``--device-id`` from its policy's ``rootDevices``, as the SR-IOV device plugin
would pick one); a runtime attaches a pod to the 8 networks. Then netN is a
VF of GPU N's NIC, its record carries that NIC's PCIe root and NUMA node, its
RDMA device is ``railN`` in the pod on both nodes, marked with the TOS; DEL
puts every name and TOS back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cni.kernel.roce import ConfigfsRoceTos
from cni.record.store import AttachmentRecords
from railyard_sim import agent, daemon
from railyard_sim.lab import Lab
from railyard_sim.recording import rdma_of
from railyard_sim.runtime import (
    DEBIAN_BIN,
    Attachment,
    PluginError,
    Runtime,
    plugin_bin_dir,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
TOS = 106


@dataclass
class Node:
    name: str
    lab: Lab
    work: Path

    @property
    def state_dir(self) -> Path:
        return self.work / "state"

    def railyard(self, *args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "railyard", *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={"PATH": "/usr/bin:/bin"},
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def runtime(self) -> Runtime:
        # The warm path (the lab's agent): 32 plugin calls per node.
        warm = agent.shim_bin_dir(self.work / "warm-bin", self.lab.dir)
        return Runtime(
            [warm, DEBIAN_BIN],
            env={
                "RAILYARD_STATE_DIR": str(self.state_dir),
                **daemon.client_env(self.lab.dir),
            },
            cache_dir=self.work / "results",
        )


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[Node]]:
    made: list[Node] = []
    try:
        for name in ("node-a", "node-b"):
            lab = Lab.up(tmp_path / name / "lab", rails=8, vfs_per_pf=1, shape="dgx")
            made.append(Node(name, lab, tmp_path / name))
            daemon.start(lab.dir)
            agent.start(lab.dir, spares=1)
        yield made
    finally:
        for node in made:
            agent.stop(node.lab.dir)
            node.lab.down()


def rails_for(node: Node) -> tuple[dict[str, Any], Path]:
    """``railyard rails`` as JSON, and its YAML applied on the node."""
    sys_root = str(node.lab.sys_root)
    pairing = json.loads(node.railyard("rails", "--sysfs", sys_root, "--json"))
    manifest = node.work / "rails.yaml"
    manifest.write_text(
        node.railyard(
            "rails",
            "--sysfs",
            sys_root,
            "-o",
            "yaml",
            "--node",
            node.name,
            "--roce-tos",
            str(TOS),
        )  # fmt: skip
    )
    vf_of_pf = {r.pf_pci: r.vfs[0].pci for r in node.lab.rails}
    pins = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if doc["kind"] == "SriovNetworkNodePolicy":
            [pf] = doc["spec"]["nicSelector"]["rootDevices"]
            resource = f"spidernet.io/{doc['spec']['resourceName']}"
            pins += ["--device-id", f"{resource}={vf_of_pf[pf]}"]
    conf_dir = node.work / "net.d"
    node.railyard("apply", "-f", str(manifest), "--cni-conf-dir", str(conf_dir),
                  "--socket", str(daemon.socket_path(node.lab.dir)), *pins)  # fmt: skip
    return pairing, conf_dir


def test_each_gpus_nic_is_its_pods_net_n_named_alike_on_two_nodes(
    nodes: list[Node],
) -> None:
    names_per_node = []
    for node in nodes:
        pairing, conf_dir = rails_for(node)
        rt = node.runtime()
        pod_name = node.lab.netns_name("gpupod")
        subprocess.run(["ip", "netns", "add", pod_name], check=True)
        pod = f"/var/run/netns/{pod_name}"
        confs = {
            n: json.loads((conf_dir / f"gpu{n}-sriov.conflist").read_text())
            for n in range(1, 9)
        }
        roce = ConfigfsRoceTos(node.lab.sys_root)
        before = {
            r.pf_pci: roce.read(r.vfs[0].rdma, r.vfs[0].pci) for r in node.lab.rails
        }
        for n, conf in confs.items():
            result = rt.add(conf, Attachment("gpupod", pod, f"net{n}"))
            # The topology goes to the record, never into the CNI result.
            assert set(result) <= {"cniVersion", "interfaces", "ips", "routes", "dns"}
            for iface in result["interfaces"]:
                assert set(iface) <= {"name", "mac", "mtu", "sandbox", "pciID"}

        records = AttachmentRecords(node.state_dir)
        names = []
        for rail in pairing["rails"]:
            n = rail["rail"]
            st = records.any_vf("gpupod", f"net{n}")
            assert st is not None
            lab_rail = next(r for r in node.lab.rails if r.vfs[0].pci == st.pci)
            # netN is a VF of the NIC paired with GPU N-1 (nvidia-smi's GPU<N-1>).
            assert lab_rail.pf_pci == rail["nic"], (n, rail)
            gpu = next(g for g in pairing["gpus"] if g["pci"] == rail["gpu"])
            assert (st.pcie_root, st.numa_node) == (gpu["pcieRoot"], gpu["numaNode"])
            name, where = rdma_of(node.lab.dir, st.pci) or ("", "missing")
            assert where == pod
            names.append(name)
            tos = node.lab.sys_root / (
                f"kernel/config/rdma_cm/{lab_rail.vfs[0].rdma}/ports/1/default_roce_tos"
            )
            assert tos.read_text().strip() == str(TOS)
        names_per_node.append(names)

        for n in reversed(confs):
            rt.delete(confs[n], Attachment("gpupod", pod, f"net{n}"))
        for r in node.lab.rails:
            assert rdma_of(node.lab.dir, r.vfs[0].pci) == (r.vfs[0].rdma, None)
            after = roce.read(r.vfs[0].rdma, r.vfs[0].pci)
            assert after == before[r.pf_pci]
        assert records.all() == []

    assert names_per_node[0] == names_per_node[1] == [f"rail{n}" for n in range(1, 9)]


# ------------------------------------------------- one node, the real binaries


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with Lab.up(tmp_path / "lab", rails=1, vfs_per_pf=2) as built:
        yield built


def named_chain(pci: str) -> dict[str, Any]:
    rdma = {"type": "rdma", "deviceID": pci, "rdmaDevName": "rail{rail}",
            "roceTos": TOS}  # fmt: skip
    return {
        "cniVersion": "1.0.0",
        "name": "gpu1-rdma",
        "plugins": [{"type": "sriov", "deviceID": pci}, rdma],
    }


def test_a_netns_gone_before_del_gets_its_name_and_tos_back(
    lab: Lab, tmp_path: Path
) -> None:
    vf = lab.rail(1).vfs[0]
    roce = ConfigfsRoceTos(lab.sys_root)
    before = roce.read(vf.rdma, vf.pci)
    rt = Runtime([plugin_bin_dir(lab.dir), DEBIAN_BIN],
                 env={"RAILYARD_STATE_DIR": str(tmp_path / "state")},
                 cache_dir=tmp_path / "results")  # fmt: skip
    pod = lab.netns_name("vanish")
    subprocess.run(["ip", "netns", "add", pod], check=True)
    att = Attachment("c1", f"/var/run/netns/{pod}", "net1")
    rt.add(named_chain(vf.pci), att)
    assert rdma_of(lab.dir, vf.pci) == ("rail1", att.netns)

    lab.vanish_netns(pod, "net1")  # the kernel returns it to the host as rail1
    assert rdma_of(lab.dir, vf.pci) == ("rail1", None)
    rt.delete(named_chain(vf.pci), Attachment("c1", "", "net1"))
    assert rdma_of(lab.dir, vf.pci) == (vf.rdma, None)
    assert roce.read(vf.rdma, vf.pci) == before


def test_a_second_pod_asking_for_a_held_name_fails_cleanly(
    lab: Lab, tmp_path: Path
) -> None:
    first, second = lab.rail(1).vfs
    rt = Runtime([plugin_bin_dir(lab.dir), DEBIAN_BIN],
                 env={"RAILYARD_STATE_DIR": str(tmp_path / "state")},
                 cache_dir=tmp_path / "results")  # fmt: skip
    pods = []
    for name in ("p1", "p2"):
        pods.append(f"/var/run/netns/{lab.netns_name(name)}")
        subprocess.run(["ip", "netns", "add", lab.netns_name(name)], check=True)
    rt.add(named_chain(first.pci), Attachment("c1", pods[0], "net1"))
    with pytest.raises(PluginError) as failed:
        rt.add(named_chain(second.pci), Attachment("c2", pods[1], "net1"))
    assert (failed.value.plugin, failed.value.code) == ("rdma", 100)
    assert "an RDMA device of that name exists" in failed.value.msg
    # The runtime's DEL after a failed ADD; the second VF's device is home.
    rt.delete(named_chain(second.pci), Attachment("c2", pods[1], "net1"))
    assert rdma_of(lab.dir, second.pci) == (second.rdma, None)
    assert rdma_of(lab.dir, first.pci) == ("rail1", pods[0])
