# SPDX-License-Identifier: Apache-2.0
"""The rdma plugin's ``rdmaDevName`` and ``roceTos``: set on ADD, put back on
DEL, on the rollback of each later step, when the netns died first, and by
GC; bad input refused before anything changes.

The host is ``test_rdma_plugin``'s (fake sysfs tree, ``FakeRdma`` with names
unique per host as on released kernels) plus the RoCE TOS files of the tree
(``LabRoceTos``: the production adapter with configfs' mkdir behaviour).
"""

from __future__ import annotations

import dataclasses
import errno
from pathlib import Path
from typing import Any

import pytest

from cni.deps import Deps
from cni.kernel import KernelError, RoceTosState
from cni.skel import CmdArgs
from railyard_sim.host import LabRoceTos
from tests.unit.cni.rdma.fakes import POD
from tests.unit.cni.rdma.test_rdma_plugin import VF0, VF1, Host, conf

NAMED = {"rdmaDevName": "rail{rail}", "roceTos": 106}


class TosHost(Host):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.roce = LabRoceTos(self.tree.root)
        (self.tree.root / "kernel" / "config" / "rdma_cm").mkdir(parents=True)

    def deps(self, ca: CmdArgs) -> Deps:
        return dataclasses.replace(super().deps(ca), roce=self.roce)

    def tos(self, dev: str = "mlx5_2", pci: str = VF0) -> RoceTosState:
        return self.roce.read(dev, pci)

    def configfs_tos(self, dev: str = "mlx5_2") -> str | None:
        path = self.tree.root / f"kernel/config/rdma_cm/{dev}/ports/1/default_roce_tos"
        return path.read_text().strip() if path.exists() else None

    def traffic_class(self, dev: str = "mlx5_2", pci: str = VF0) -> str:
        path = self.tree.device(pci) / f"infiniband/{dev}/tc/1/traffic_class"
        return path.read_text().strip()


def named(device_id: str = VF0, **extra: Any) -> dict[str, Any]:
    return {**conf("1.1.0", device_id=device_id), **NAMED, **extra}


@pytest.fixture
def host(tmp_path: Path) -> TosHost:
    return TosHost(tmp_path)


def test_add_sets_the_tos_moves_then_names_the_device_in_the_pod(
    host: TosHost,
) -> None:
    code, _ = host.run("ADD", named(), ifname="net3")
    assert code == 0
    assert host.rdma.where == {"rail3": POD, "mlx5_3": None}
    # Renamed from inside the pod, after the move.
    assert host.rdma.renames == [("mlx5_2", "rail3", POD)]
    assert host.configfs_tos() == "106"
    assert host.traffic_class() == "106"
    state = host.state(ifname="net3")
    assert state is not None
    assert (state["containerRdmaDevName"], state["sandboxRdmaDevName"]) == (
        "rail3",
        "mlx5_2",
    )
    assert state["roceTos"] == 106


def test_del_names_it_back_moves_it_home_and_restores_the_tos(host: TosHost) -> None:
    before = host.tos()
    host.run("ADD", named())
    assert host.run("DEL", named()) == (0, None)
    assert host.rdma.where == {"mlx5_2": None, "mlx5_3": None}
    assert host.rdma.renames[-1] == ("rail1", "mlx5_2", POD)
    assert host.tos() == before
    assert host.configfs_tos() is None  # the group ADD made is gone
    assert host.state() is None


def test_a_configfs_group_that_was_there_keeps_its_value(host: TosHost) -> None:
    group = host.tree.root / "kernel/config/rdma_cm/mlx5_2/ports/1"
    group.mkdir(parents=True)
    (group / "default_roce_tos").write_text("24\n")
    host.run("ADD", named())
    assert host.configfs_tos() == "106"
    host.run("DEL", named())
    assert host.configfs_tos() == "24"


@pytest.mark.parametrize("failing", ["move", "rename"])
def test_a_later_step_failing_rolls_the_name_move_and_tos_back(
    host: TosHost, failing: str
) -> None:
    before = host.tos()
    setattr(host.rdma, f"fail_{failing}", KernelError(f"injected {failing} failure"))
    code, out = host.run("ADD", named())
    assert code == 1 and out is not None and out["code"] == 100
    assert f"injected {failing} failure" in out["details"]
    host.rdma.fail_move = host.rdma.fail_rename = None
    assert host.rdma.where == {"mlx5_2": None, "mlx5_3": None}
    assert host.tos() == before
    assert host.state() is None


class TrafficClassRefused(LabRoceTos):
    """mlx5 refusing the tc write, after rdma_cm's configfs took the TOS."""

    def _write(self, path: Path, value: str) -> None:
        if path.name == "traffic_class" and value != "-1":
            raise OSError(errno.EINVAL, "Invalid argument")
        super()._write(path, value)


def test_a_tos_write_failing_leaves_no_tos_half_set(host: TosHost) -> None:
    before = host.tos()
    host.roce = TrafficClassRefused(host.tree.root)
    code, out = host.run("ADD", named())
    assert code == 1 and out is not None and out["code"] == 100
    assert out["msg"] == "failed to set RoCE TOS 106 on mlx5_2"
    assert host.configfs_tos() is None
    assert host.tos() == before
    assert host.rdma.where["mlx5_2"] is None and host.state() is None


def test_a_name_another_pod_holds_fails_the_add_cleanly(host: TosHost) -> None:
    assert host.run("ADD", named())[0] == 0  # pod c1 holds rail1
    before = host.tos("mlx5_3", VF1)
    code, out = host.run("ADD", named(VF1), cid="c2", netns=POD)
    assert code == 1 and out is not None and out["code"] == 100
    assert out["msg"] == (
        f"cannot name RDMA device mlx5_3 'rail1' in {POD}: an RDMA device of "
        "that name exists"
    )
    assert "unique per host" in out["details"]
    assert host.rdma.where == {"rail1": POD, "mlx5_3": None}
    assert host.tos("mlx5_3", VF1) == before
    assert host.state("c2") is None and host.state("c1") is not None


def test_del_after_the_netns_died_renames_it_in_the_host(host: TosHost) -> None:
    before = host.tos()
    host.run("ADD", named())
    host.rdma.vanish(POD)  # the kernel returns it to the host as "rail1"
    assert host.rdma.where["rail1"] is None
    assert host.run("DEL", named()) == (0, None)
    assert host.rdma.where == {"mlx5_2": None, "mlx5_3": None}
    assert host.rdma.renames[-1] == ("rail1", "mlx5_2", None)
    assert host.tos() == before and host.state() is None


def test_gc_names_back_moves_home_and_restores_the_tos(host: TosHost) -> None:
    before = host.tos()
    host.run("ADD", named(), cid="gone")
    gc = {**named(), "cni.dev/valid-attachments": []}
    del gc["prevResult"]
    assert host.run("GC", gc, netns="") == (0, None)
    assert host.rdma.where == {"mlx5_2": None, "mlx5_3": None}
    assert host.tos() == before and host.state("gone") is None


@pytest.mark.parametrize(
    "extra, ifname, code, msg",
    [
        ({"rdmaDevName": "r" * 64}, "net1", 7, "rdmaDevName 'rrr"),
        ({"rdmaDevName": "rail {rail}"}, "net1", 7, "gives no valid name"),
        ({"rdmaDevName": "gpu/{rail}"}, "net1", 7, "gives no valid name"),
        ({"rdmaDevName": "{pod}"}, "net1", 7, "unknown field {pod}"),
        ({"rdmaDevName": "rail{rail}"}, "eth", 7, "ends in none"),
        ({"roceTos": 256}, "net1", 7, "invalid roceTos"),
        ({"roceTos": -1}, "net1", 7, "invalid roceTos"),
        # A value of the wrong JSON type: code 6, as for every key.
        ({"rdmaDevName": 7}, "net1", 6, "rdmaDevName"),
        ({"roceTos": "106"}, "net1", 6, "roceTos"),
        ({"roceTos": True}, "net1", 6, "roceTos"),
    ],
)
def test_bad_input_is_refused_before_any_change(
    host: TosHost, extra: dict[str, Any], ifname: str, code: int, msg: str
) -> None:
    status, out = host.run("ADD", {**named(), **extra}, ifname=ifname)
    assert status == 1 and out is not None and out["code"] == code
    assert msg in out["msg"] + out.get("details", "")
    assert host.rdma.where == {"mlx5_2": None, "mlx5_3": None}
    assert host.rdma.calls == [] and host.rdma.renames == []
    assert host.configfs_tos() is None and host.state(ifname=ifname) is None


def test_a_tos_on_an_infiniband_port_is_refused_before_any_change(
    host: TosHost,
) -> None:
    port = host.tree.device(VF0) / "infiniband/mlx5_2/ports/1/link_layer"
    port.write_text("InfiniBand\n")
    code, out = host.run("ADD", named())
    assert code == 1 and out is not None and out["code"] == 7
    assert "its link layer is InfiniBand" in out["msg"]
    assert host.rdma.calls == [] and host.configfs_tos() is None
    assert host.state() is None
