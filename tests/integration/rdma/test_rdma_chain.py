# SPDX-License-Identifier: Apache-2.0
"""The rdma binary chained after sriov, on the simulated host, as a runtime runs it.

Plugins are the real console scripts executed by ``railyard_sim.runtime.Runtime``
(libcni's conflist semantics: prevResult chaining on ADD, reverse DEL). The
lab records each RDMA device's netns; reads go through the recording state,
never through the plugin's own adapters. No IPAM: the RDMA part is the point.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from railyard_sim.lab import Lab, RailSpec, VfSpec
from railyard_sim.recording import rdma_location, set_netns_mode
from railyard_sim.runtime import (
    DEBIAN_BIN,
    Attachment,
    PluginError,
    Runtime,
    plugin_bin_dir,
)

pytestmark = pytest.mark.integration


class Chain:
    def __init__(self, lab: Lab, root: Path) -> None:
        self.lab = lab
        self.state_dir = root / "state"
        self.rt = Runtime(
            [plugin_bin_dir(lab.dir), DEBIAN_BIN],
            env={"RAILYARD_STATE_DIR": str(self.state_dir)},
            cache_dir=root / "results",
        )
        self.pods = 0

    def pod(self) -> str:
        self.pods += 1
        name = self.lab.netns_name(f"rdpod{self.pods}")
        subprocess.run(["ip", "netns", "add", name], check=True)
        return f"/var/run/netns/{name}"

    @property
    def rail(self) -> RailSpec:
        return self.lab.rail(1)

    def conflist(
        self, vf: VfSpec, device_id: bool = True, mac: str = "", version: str = "1.0.0"
    ) -> dict[str, Any]:
        sriov: dict[str, Any] = {"type": "sriov", "deviceID": vf.pci}
        if mac:
            sriov["mac"] = mac
        rdma: dict[str, Any] = {"type": "rdma"}
        if device_id:
            rdma["deviceID"] = vf.pci
        return {"cniVersion": version, "name": "gpu1-rdma", "plugins": [sriov, rdma]}

    def state(self, cid: str = "c1", ifname: str = "net1") -> Path:
        return self.state_dir / "rdma" / f"{cid}-{ifname}.json"


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Chain]:
    with Lab.up(tmp_path / "lab", rails=1, vfs_per_pf=2) as lab:
        yield Chain(lab, tmp_path)


def test_chained_add_moves_the_rdma_device_and_del_brings_it_back(
    chain: Chain,
) -> None:
    vf = chain.rail.vfs[0]
    pod = chain.pod()
    att = Attachment("c1", pod, "net1")
    conf = chain.conflist(vf)
    result = chain.rt.add(conf, att)
    # sriov's result passed through by rdma (same interface, same version).
    assert result["cniVersion"] == "1.0.0"
    assert [i["name"] for i in result["interfaces"]] == ["net1"]
    assert rdma_location(chain.lab.dir, vf.rdma) == pod
    assert rdma_location(chain.lab.dir, chain.rail.vfs[1].rdma) is None
    saved = json.loads(chain.state().read_text())
    assert (saved["deviceID"], saved["containerRdmaDevName"]) == (vf.pci, vf.rdma)

    chain.rt.check(conf, att)
    chain.rt.delete(conf, att)
    assert rdma_location(chain.lab.dir, vf.rdma) is None
    assert not chain.state().exists()
    chain.rt.delete(conf, att, prev_result=result)  # a second DEL succeeds


def test_rdma_without_device_id_finds_the_vf_by_the_mac_sriov_set(
    chain: Chain,
) -> None:
    vf = chain.rail.vfs[1]
    pod = chain.pod()
    att = Attachment("c2", pod, "net1")
    conf = chain.conflist(vf, device_id=False, mac="02:aa:bb:cc:dd:01")
    chain.rt.add(conf, att)
    assert rdma_location(chain.lab.dir, vf.rdma) == pod
    chain.rt.delete(conf, att)
    assert rdma_location(chain.lab.dir, vf.rdma) is None


def test_shared_mode_fails_the_chain_and_says_how_to_switch(chain: Chain) -> None:
    vf = chain.rail.vfs[0]
    set_netns_mode(chain.lab.dir, "shared")
    pod = chain.pod()
    att = Attachment("c3", pod, "net1")
    conf = chain.conflist(vf)
    with pytest.raises(PluginError) as info:
        chain.rt.add(conf, att)
    err = info.value
    assert (err.plugin, err.code) == ("rdma", 100)
    assert "expecting it to be set to exclusive" in err.msg
    assert "rdma system set netns exclusive" in err.details
    assert "Traceback" not in err.stderr
    assert rdma_location(chain.lab.dir, vf.rdma) is None
    chain.rt.delete(conf, att)  # libcni's cleanup DEL after a failed ADD


def test_rdma_alone_without_prev_result_is_refused(chain: Chain) -> None:
    vf = chain.rail.vfs[0]
    pod = chain.pod()
    only_rdma = {
        "cniVersion": "1.0.0",
        "name": "r",
        "plugins": [{"type": "rdma", "deviceID": vf.pci}],
    }
    with pytest.raises(PluginError) as info:
        chain.rt.add(only_rdma, Attachment("c4", pod, "net1"))
    assert info.value.code == 7
    assert "expected to be called as part of a plugin chain" in info.value.msg


def test_host_without_rdma_fails_cleanly_not_with_a_traceback(chain: Chain) -> None:
    vf = chain.rail.vfs[0]
    set_netns_mode(chain.lab.dir, "unsupported")
    pod = chain.pod()
    att = Attachment("c5", pod, "net1")
    conf = chain.conflist(vf)
    with pytest.raises(PluginError) as info:
        chain.rt.add(conf, att)
    assert (info.value.plugin, info.value.code) == ("rdma", 100)
    assert info.value.msg == "RDMA is not available on this host"
    assert "Traceback" not in info.value.stderr
    chain.rt.delete(conf, att)


def test_del_with_empty_netns_after_the_pod_netns_vanished(chain: Chain) -> None:
    vf = chain.rail.vfs[0]
    pod = chain.pod()
    conf = chain.conflist(vf)
    result = chain.rt.add(conf, Attachment("c6", pod, "net1"))
    chain.lab.vanish_netns(pod, "net1")
    chain.rt.delete(conf, Attachment("c6", "", "net1"), prev_result=result)
    assert rdma_location(chain.lab.dir, vf.rdma) is None
    assert not chain.state("c6").exists()  # rdma-cni leaks it (PR #165)


def test_del_with_empty_netns_while_the_pod_lives_moves_it_back(
    chain: Chain,
) -> None:
    vf = chain.rail.vfs[0]
    pod = chain.pod()
    conf = chain.conflist(vf)
    only_rdma = {**conf, "plugins": [conf["plugins"][1]]}
    result = chain.rt.add(conf, Attachment("c7", pod, "net1"))
    # DEL of the rdma plugin alone, as a runtime that lost the netns path would.
    chain.rt.delete(only_rdma, Attachment("c7", "", "net1"), prev_result=result)
    assert rdma_location(chain.lab.dir, vf.rdma) is None
    assert not chain.state("c7").exists()
    chain.rt.delete(conf, Attachment("c7", pod, "net1"), prev_result=result)
