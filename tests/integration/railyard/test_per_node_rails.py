# SPDX-License-Identifier: Apache-2.0
"""Spiderpool's RoCE guide, Solution 2, end to end on two simulated nodes.

``railyard apply`` takes the guide's documents unchanged (tests/fixtures/
roce-solution2: 2 nodes x 8 rails of /27 pools, one wildcard network per rail
with matchMasterSubnet) into one ipamd; each node is a lab whose PFs hold an
address in that node's rail subnets, with its own agent; a runtime on each node
(RAILYARD_NODE_NAME) execs the rendered conflists through the agent's shims.
Each pod's rails come from its node's pools, rail 1's table carries the
pool's RDMA subnet route, and a node whose PF has no address in any candidate
pool is refused naming the node, the PF and the candidates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from railyard_sim import agent, daemon
from railyard_sim.lab import Lab
from railyard_sim.runtime import DEBIAN_BIN, Attachment, PluginError, Runtime
from tests.doubles.sriov_lab import addresses, routes

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
GUIDE = REPO / "tests" / "fixtures" / "roce-solution2"
RAILS = 8


def node_subnets(node: int) -> list[str]:
    """The guide's plan: node N's rail R is 172.16.N.(32(R-1))/27."""
    return [f"172.16.{node}.{32 * r}/27" for r in range(RAILS)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Lab]]:
    """Two nodes (labs) sharing node1's ipamd, agents on both, the guide's
    documents applied (the conf dir is ``<node1>/net.d``); built once."""
    tmp_path = tmp_path_factory.mktemp("i22cluster")
    with ExitStack() as stack:
        labs = {}
        for n in (1, 2):
            lab = stack.enter_context(
                Lab.up(
                    tmp_path / f"node{n}",
                    rails=RAILS,
                    vfs_per_pf=1,
                    rail_subnets=node_subnets(n),
                )
            )
            labs[f"node{n}"] = lab
        daemon.start(labs["node1"].dir)
        stack.callback(daemon.stop, labs["node1"].dir)
        for lab in labs.values():
            agent.start(lab.dir, spares=1)
            stack.callback(agent.stop, lab.dir)
        applied = apply_guide(labs["node1"], conf_dir_of(labs))
        assert applied.returncode == 0, applied.stderr
        assert "spiderippool/eno3np8-rail8-node2 created" in applied.stdout
        yield labs


def conf_dir_of(cluster: dict[str, Lab]) -> Path:
    return cluster["node1"].dir / "net.d"


def apply_guide(ipamd: Lab, conf_dir: Path) -> subprocess.CompletedProcess[str]:
    docs = [p.read_text() for p in sorted(GUIDE.glob("*.yaml"))]
    return subprocess.run(
        [sys.executable, "-m", "railyard", "apply", "-f", "-",
         "--cni-conf-dir", str(conf_dir)],
        input="---\n".join(docs),
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **daemon.client_env(ipamd.dir)},
        timeout=120,
    )  # fmt: skip


def node_runtime(lab: Lab, ipamd: Lab, node: str, tmp_path: Path) -> Runtime:
    env = {
        **daemon.client_env(ipamd.dir),
        "RAILYARD_NODE_NAME": node,
        "RAILYARD_STATE_DIR": str(tmp_path / node / "state"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    bins = agent.shim_bin_dir(tmp_path / node / "bin", lab.dir)
    return Runtime([bins, DEBIAN_BIN], env=env, cache_dir=tmp_path / node / "c")


def rail_conflist(conf_dir: Path, lab: Lab, rail: int) -> dict[str, Any]:
    conf = json.loads((conf_dir / f"sriov-eno3np{rail}.conflist").read_text())
    for plugin in conf["plugins"]:
        if plugin["type"] in ("sriov", "rdma"):
            # what the device plugin hands Multus: this node's VF on the rail
            plugin["deviceID"] = lab.rail(rail).vfs[0].pci
    return conf


def test_guides_solution_2_gives_each_node_its_own_rail_pools(
    cluster: dict[str, Lab], tmp_path: Path
) -> None:
    conf_dir = conf_dir_of(cluster)
    conflist = json.loads((conf_dir / "sriov-eno3np1.conflist").read_text())
    assert conflist["plugins"][0]["ipam"] == {
        "type": "spiderpool",
        "default_ipv4_ippool": ["eno3np1-rail1*"],
        "match_master_subnet": True,
    }

    for number in (1, 2):
        node = f"node{number}"
        lab = cluster[node]
        rt = node_runtime(lab, cluster["node1"], node, tmp_path)
        pod = lab.netns_name("p")
        subprocess.run(["ip", "netns", "add", pod], check=True)
        atts = [
            Attachment(f"c{node}", f"/var/run/netns/{pod}", f"net{r}")
            for r in range(1, RAILS + 1)
        ]
        try:
            for rail, att in enumerate(atts, start=1):
                rt.add(rail_conflist(conf_dir, lab, rail), att)
            got = [addresses(f"net{r}", pod) for r in range(1, RAILS + 1)]
            assert got == [
                [f"172.16.{number}.{32 * (r - 1) + 2}/27"] for r in range(1, RAILS + 1)
            ]
            # rail 1's pool route (the RDMA /16) in net1's table
            assert {(r["dst"], r.get("gateway")) for r in routes(pod, "101")} >= {
                ("172.16.0.0/16", f"172.16.{number}.1")
            }
        finally:
            for rail, att in reversed(list(enumerate(atts, start=1))):
                rt.delete(rail_conflist(conf_dir, lab, rail), att)
            subprocess.run(["ip", "netns", "del", pod], check=False)


def test_a_node_without_a_matching_pool_is_refused_naming_node_pf_and_pools(
    cluster: dict[str, Lab], tmp_path: Path
) -> None:
    conf_dir = conf_dir_of(cluster)
    lab = cluster["node2"]
    # node2's rail 2 PF loses its address: no candidate pool holds its subnet
    pf = lab.rail(2).pf_netdev
    subprocess.run(
        ["ip", "addr", "del", lab.rail(2).pf_address_v4, "dev", pf], check=True
    )
    rt = node_runtime(lab, cluster["node1"], "node2", tmp_path)
    pod = lab.netns_name("q")
    subprocess.run(["ip", "netns", "add", pod], check=True)
    att = Attachment("cq", f"/var/run/netns/{pod}", "net2")
    try:
        with pytest.raises(PluginError) as err:
            rt.add(rail_conflist(conf_dir, lab, 2), att)
        assert err.value.plugin == "sriov"
        text = f"{err.value.msg} {err.value.details}"
        assert f"node 'node2', master {pf} has no IPv4 address" in text
        assert "eno3np2-rail2-node1 (172.16.1.32/27)" in text
        assert "eno3np2-rail2-node2 (172.16.2.32/27)" in text
        rt.delete(rail_conflist(conf_dir, lab, 2), att)
        assert (
            subprocess.run(
                ["ip", "-n", pod, "link", "show", "net2"], capture_output=True
            ).returncode
            != 0
        )  # nothing left in the pod
    finally:
        subprocess.run(["ip", "netns", "del", pod], check=False)
        subprocess.run(
            ["ip", "addr", "add", lab.rail(2).pf_address_v4, "dev", pf], check=False
        )
