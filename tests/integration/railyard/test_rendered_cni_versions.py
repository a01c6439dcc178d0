# SPDX-License-Identifier: Apache-2.0
"""A rendered network works at every CNI version a delegating multus may send.

Multus hands each delegate the network's own ``cniVersion``; ``railyard
apply`` renders 1.0.0 unless the SpiderMultusConfig asks for another
(``spec.cniVersion``). The guide's 02 (sriov + rdma), rendered at each
version, goes through the lab agent's shims as a runtime execs them: ADD
reports that version, CHECK passes where the version has it, DEL restores.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cni import version as cni_version
from railyard import render
from railyard.network import parse
from railyard_sim.lab import Lab
from railyard_sim.runtime import Attachment
from tests.doubles.lab_ipamd import lab_with_agent, warm_runtime
from tests.doubles.sriov_lab import addresses, link

pytestmark = pytest.mark.integration

SEED = Path(__file__).resolve().parents[2] / "unit" / "railyard" / "seed"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("i22versions")
    with lab_with_agent(root, rails=1, vfs_per_pf=1) as built:
        yield built


def guide_network_at(version: str | None) -> dict:
    _pool, smc = yaml.safe_load_all(
        (SEED / "02-roce-pool-and-network.yaml").read_text()
    )
    if version is not None:
        smc["spec"]["cniVersion"] = version
    return render.conflist(parse(smc))


def test_rendered_networks_default_to_1_0_0() -> None:
    assert guide_network_at(None)["cniVersion"] == "1.0.0"


@pytest.mark.parametrize("version", cni_version.ALL)
def test_the_rendered_network_attaches_at(
    version: str, lab: Lab, tmp_path: Path
) -> None:
    conf = guide_network_at(version)
    assert conf["cniVersion"] == version
    for plugin in conf["plugins"]:
        plugin["deviceID"] = lab.rail(1).vfs[0].pci
    rt = warm_runtime(lab, tmp_path)
    pod = lab.netns_name("v")
    subprocess.run(["ip", "netns", "add", pod], check=True)
    att = Attachment("cver", f"/var/run/netns/{pod}", "net1")
    try:
        result = rt.add(conf, att)
        assert result["cniVersion"] == version
        assert addresses("net1", pod) == ["172.16.11.1/24"]
        if cni_version.greater_than_or_equal(version, cni_version.CHECK_SINCE):
            rt.check(conf, att)
        rt.delete(conf, att)
        assert link("net1", pod) is None
        assert link(lab.rail(1).vfs[0].netdev) is not None
    finally:
        subprocess.run(["ip", "netns", "del", pod], check=False)
