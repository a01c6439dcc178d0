# SPDX-License-Identifier: Apache-2.0
"""The chained rdma plugin, run in-process through skel with fake RDMA netlink.

Sysfs is a tmp fake tree (the real ``Sysfs`` over it), the RDMA seam is
``FakeRdma`` (exclusive-mode visibility), state and locks live in tmp_path.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cni.deps import Deps
from cni.exporter.records import pod_nics
from cni.kernel import DeviceBusy, VfInfo
from cni.kernel.sysfs import Sysfs
from cni.plugins.rdma.commands import plugin_funcs
from cni.record.store import AttachmentRecords
from cni.record.vf import Stage, VfState
from cni.skel import CmdArgs, run_plugin
from cni.state.cache import StateCache
from railyard_sim.pci_tree import PciTree
from tests.unit.cni.rdma.fakes import POD, FakeRdma, FakeVfOps, NotUsed

PF = "0000:3b:00.0"
VF0 = "0000:3b:00.2"
VF1 = "0000:3b:00.3"
MAC1 = "02:11:22:33:44:55"
PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [
        {"name": "net1", "mac": MAC1, "mtu": 9000, "sandbox": POD},
    ],
    "ips": [{"address": "172.16.11.5/24", "gateway": "172.16.11.254", "interface": 0}],
    "dns": {},
}


class Host:
    """A fake host: one PF with two VFs, each with its RDMA device."""

    def __init__(self, tmp: Path) -> None:
        self.tree = PciTree(tmp / "sys")
        self.tree.pf(PF, "ens1f0", numvfs=2)
        self.tree.vf(PF, 0, VF0, "ens1f0v0")
        self.tree.vf(PF, 1, VF1, "ens1f0v1")
        self.tree.rdma(VF0, "mlx5_2")
        self.tree.rdma(VF1, "mlx5_3")
        self.rdma = FakeRdma(mlx5_2=None, mlx5_3=None)
        self.vf = FakeVfOps({"ens1f0": {0: VfInfo(vf=0), 1: VfInfo(vf=1, mac=MAC1)}})
        self.state_dir = tmp / "state"

    def deps(self, _ca: CmdArgs) -> Deps:
        return Deps(
            links=NotUsed("links"),  # type: ignore[arg-type]
            netns=NotUsed("netns"),  # type: ignore[arg-type]
            probes=NotUsed("probes"),  # type: ignore[arg-type]
            vf=self.vf,  # type: ignore[arg-type]
            rdma=self.rdma,
            waiter=NotUsed("waiter"),  # type: ignore[arg-type]
            sysfs=Sysfs(root=self.tree.root),
            state_dir=self.state_dir,
        )

    def run(
        self,
        command: str,
        conf: dict[str, Any],
        netns: str = POD,
        cid: str = "c1",
        ifname: str = "net1",
    ) -> tuple[int, dict[str, Any] | None]:
        env = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": cid,
            "CNI_NETNS": netns,
            "CNI_IFNAME": ifname,
            "CNI_PATH": "/opt/cni/bin",
        }
        out = io.StringIO()
        code = run_plugin(
            plugin_funcs(self.deps),
            "rdma test",
            env=env,
            stdin=io.BytesIO(json.dumps(conf).encode()),
            stdout=out,
            stderr=io.StringIO(),
            deadline_seconds=None,
        )
        text = out.getvalue()
        return code, (json.loads(text) if text.strip() else None)

    def state(self, cid: str = "c1", ifname: str = "net1") -> dict[str, Any] | None:
        return StateCache(self.state_dir, "rdma").load(cid, ifname)


def conf(
    version: str = "0.4.0",
    device_id: str | None = VF0,
    prev: dict[str, Any] | None = PREV,
) -> dict[str, Any]:
    c: dict[str, Any] = {"cniVersion": version, "name": "rdma-net", "type": "rdma"}
    if device_id is not None:
        c["deviceID"] = device_id
    if prev is not None:
        c["prevResult"] = prev
    return c


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


# -------------------------------------------------------------------- ADD


def test_add_moves_the_device_saves_state_and_passes_prev_result_through(
    host: Host,
) -> None:
    code, out = host.run("ADD", conf("0.4.0"))
    assert code == 0
    assert host.rdma.where["mlx5_2"] == POD
    assert host.rdma.where["mlx5_3"] is None
    # prevResult unchanged, converted to the config's 0.4.0 (ip "version", no mtu).
    assert out == {
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "net1", "mac": MAC1, "sandbox": POD}],
        "ips": [
            {
                "version": "4",
                "address": "172.16.11.5/24",
                "gateway": "172.16.11.254",
                "interface": 0,
            }
        ],
        "dns": {},
    }
    state = host.state()
    assert state is not None
    assert state["deviceID"] == VF0
    assert state["sandboxRdmaDevName"] == state["containerRdmaDevName"] == "mlx5_2"
    assert state["netns"] == POD


def test_add_without_prev_result_says_it_must_be_chained(host: Host) -> None:
    code, out = host.run("ADD", conf(prev=None))
    assert code == 1 and out is not None
    assert out["code"] == 7
    assert out["msg"] == "RDMA-CNI is expected to be called as part of a plugin chain"
    assert host.rdma.calls == []


def test_add_in_shared_mode_is_refused_and_says_how_to_switch(host: Host) -> None:
    host.rdma.mode = "shared"
    code, out = host.run("ADD", conf())
    assert code == 1 and out is not None
    assert out["code"] == 100
    assert "set to shared, expecting it to be set to exclusive" in out["msg"]
    assert "rdma system set netns exclusive" in out["details"]
    assert "options ib_core netns_mode=0" in out["details"]
    assert host.rdma.where["mlx5_2"] is None
    assert host.state() is None


def test_add_with_no_rdma_device_under_the_vf_fails_clearly(host: Host) -> None:
    host.tree.remove_rdma(VF0, "mlx5_2")
    code, out = host.run("ADD", conf())
    assert code == 1 and out is not None
    assert out["msg"] == f"failed to get RDMA device for device ID {VF0}"
    assert "no RDMA devices found" in out["details"]
    assert host.state() is None


def test_add_with_two_rdma_devices_under_the_vf_fails_clearly(host: Host) -> None:
    host.tree.rdma(VF0, "mlx5_9")
    code, out = host.run("ADD", conf())
    assert code == 1 and out is not None
    assert "more than one RDMA device ['mlx5_2', 'mlx5_9']" in out["details"]
    assert host.rdma.where["mlx5_2"] is None and host.state() is None


def test_add_whose_move_fails_leaves_no_state(host: Host) -> None:
    host.rdma.fail_move = DeviceBusy("EBUSY")
    code, out = host.run("ADD", conf())
    assert code == 1 and out is not None
    assert out["msg"] == f"failed to move RDMA device mlx5_2 to netns {POD}"
    assert host.state() is None


def test_add_without_device_id_finds_the_vf_by_its_admin_mac(host: Host) -> None:
    code, _ = host.run("ADD", conf(device_id=None))
    assert code == 0
    assert host.rdma.where["mlx5_3"] == POD  # VF1 has MAC1 in the PF's table
    assert host.state()["deviceID"] == VF1  # type: ignore[index]


def test_add_without_device_id_matches_an_ipoib_address_by_guid(host: Host) -> None:
    guid = "02:c9:00:00:00:00:00:07"
    host.vf.tables["ens1f0"][0] = VfInfo(vf=0, node_guid=guid, port_guid=guid)
    ipoib = "00:00:10:49:fe:80:00:00:00:00:00:00:" + guid
    prev = {**PREV, "interfaces": [{"name": "net1", "mac": ipoib, "sandbox": POD}]}
    code, _ = host.run("ADD", conf(device_id=None, prev=prev))
    assert code == 0
    assert host.rdma.where["mlx5_2"] == POD


def test_add_without_device_id_falls_back_to_the_sriov_state(host: Host) -> None:
    other = "02:99:99:99:99:99"  # no admin MAC set on any VF
    prev = {**PREV, "interfaces": [{"name": "net1", "mac": other, "sandbox": POD}]}
    StateCache(host.state_dir, "sriov").save("c1", "net1", {"pci": VF0})
    code, _ = host.run("ADD", conf(device_id=None, prev=prev))
    assert code == 0
    assert host.rdma.where["mlx5_2"] == POD


def test_add_without_device_id_and_two_interfaces_requires_device_id(
    host: Host,
) -> None:
    two = {
        **PREV,
        "interfaces": [
            {"name": "net1", "mac": MAC1, "sandbox": POD},
            {"name": "net2", "mac": "02:00:00:00:00:02", "sandbox": POD},
        ],
    }
    code, out = host.run("ADD", conf(device_id=None, prev=two))
    assert code == 1 and out is not None
    assert out["msg"] == (
        '"DeviceID" network configuration attribute is required for rdma CNI'
    )


def test_add_with_a_non_pci_device_id_is_a_config_error(host: Host) -> None:
    code, out = host.run("ADD", conf(device_id="mlx5_core.sf.4"))
    assert code == 1 and out is not None
    assert out["code"] == 7
    assert "auxiliary (SF) devices are not supported" in out["details"]


def test_a_repeated_add_keeps_the_attachment_and_its_state(host: Host) -> None:
    assert host.run("ADD", conf())[0] == 0
    code, out = host.run("ADD", conf())
    assert code == 0 and out is not None and out["interfaces"][0]["name"] == "net1"
    assert host.rdma.where["mlx5_2"] == POD
    assert host.state() is not None
    assert host.run("DEL", conf()) == (0, None)
    assert host.rdma.where["mlx5_2"] is None


# -------------------------------------------------------------------- DEL


def test_del_moves_the_device_back_and_removes_the_state(host: Host) -> None:
    assert host.run("ADD", conf())[0] == 0
    code, out = host.run("DEL", conf())
    assert (code, out) == (0, None)
    assert host.rdma.where["mlx5_2"] is None
    assert host.state() is None


def test_second_del_succeeds(host: Host) -> None:
    host.run("ADD", conf())
    assert host.run("DEL", conf())[0] == 0
    assert host.run("DEL", conf()) == (0, None)


def test_del_without_state_sweeps_the_temp_file_of_a_killed_add(
    host: Host,
) -> None:
    # The ADD died between creating its state's temp file and renaming it.
    dead = subprocess.Popen(["true"])
    dead.wait()
    (host.state_dir / "rdma").mkdir(parents=True)
    left = host.state_dir / "rdma" / f".c1-net1.json.{dead.pid}-0123456789ab.tmp"
    left.write_text('{"containerID": "c1"')
    assert host.run("DEL", conf()) == (0, None)
    assert not left.exists()


def test_del_with_empty_netns_moves_it_back_from_the_recorded_netns(
    host: Host,
) -> None:
    host.run("ADD", conf())
    assert host.run("DEL", conf(), netns="") == (0, None)
    assert host.rdma.where["mlx5_2"] is None
    assert host.rdma.calls[-1] == ("mlx5_2", None, POD)
    assert host.state() is None  # rdma-cni leaks it here (PR #165)


def test_del_after_the_netns_died_cleans_up_state(host: Host) -> None:
    host.run("ADD", conf())
    host.rdma.vanish(POD)  # the kernel returned the device to the host
    assert host.run("DEL", conf(), netns="") == (0, None)
    assert host.rdma.where["mlx5_2"] is None
    assert host.state() is None


def test_failed_del_keeps_the_state_and_a_retry_completes(host: Host) -> None:
    host.run("ADD", conf())
    host.rdma.fail_move = DeviceBusy("EBUSY")
    code, out = host.run("DEL", conf())
    assert code == 1 and out is not None
    assert out["msg"] == "failed to restore RDMA device mlx5_2 to default namespace"
    assert host.state() is not None
    host.rdma.fail_move = None
    assert host.run("DEL", conf()) == (0, None)
    assert host.rdma.where["mlx5_2"] is None and host.state() is None


# ---------------------------------------------------------------- exporter


def test_the_exporter_reads_the_rdma_section_the_plugin_wrote(host: Host) -> None:
    # sriov ran first in the conflist and recorded its VF without an RDMA move.
    AttachmentRecords(host.state_dir).vf("sriov").save(
        VfState(
            container_id="c1",
            ifname="net1",
            network="rdma-net",
            netns=POD,
            pci=VF0,
            stage=Stage.ADDRESSES_RECORDED,
        )
    )
    assert host.run("ADD", conf())[0] == 0
    [nic] = pod_nics(host.state_dir)
    assert (nic.container_id, nic.ifname, nic.pci, nic.rdma_device) == (
        "c1",
        "net1",
        VF0,
        "mlx5_2",
    )
    assert host.run("DEL", conf()) == (0, None)
    [nic] = pod_nics(host.state_dir)
    assert nic.rdma_device == ""


# ----------------------------------------------------------- CHECK, GC, STATUS


def test_check_passes_while_the_device_is_in_the_pod(host: Host) -> None:
    host.run("ADD", conf())
    assert host.run("CHECK", conf()) == (0, None)
    host.rdma.where["mlx5_2"] = None
    code, out = host.run("CHECK", conf())
    assert code == 1 and out is not None
    assert out["code"] == 106
    assert out["msg"] == f"RDMA device mlx5_2 is not in {POD}"


def test_gc_restores_attachments_the_runtime_no_longer_has(host: Host) -> None:
    host.run("ADD", conf("1.1.0"), cid="keep")
    host.run("ADD", conf("1.1.0", device_id=VF1), cid="gone")
    gc = {
        "cniVersion": "1.1.0",
        "name": "rdma-net",
        "type": "rdma",
        "cni.dev/valid-attachments": [{"containerID": "keep", "ifname": "net1"}],
    }
    assert host.run("GC", gc, netns="") == (0, None)
    assert host.rdma.where == {"mlx5_2": POD, "mlx5_3": None}
    assert host.state("keep") is not None and host.state("gone") is None


def test_status_is_unavailable_in_shared_mode(host: Host) -> None:
    status = {"cniVersion": "1.1.0", "name": "rdma-net", "type": "rdma"}
    assert host.run("STATUS", status, netns="") == (0, None)
    host.rdma.mode = "shared"
    code, out = host.run("STATUS", status, netns="")
    assert code == 1 and out is not None and out["code"] == 50
