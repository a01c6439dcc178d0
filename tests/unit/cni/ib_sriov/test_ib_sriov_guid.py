# SPDX-License-Identifier: Apache-2.0
"""ib-sriov's GUID restore rules, per-PF lock keys and rebind timeout (no kernel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cni.deps import Deps
from cni.kernel.sysfs import Sysfs
from cni.plugins.ib_sriov.commands import (
    ALL_F_GUID,
    DEFAULT_REBIND_TIMEOUT,
    REBIND_TIMEOUT_ENV,
    pf_lock_key,
    rebind_timeout,
    restore_guid,
)
from cni.record.sections import IbSection
from railyard_sim.pci_tree import PciTree
from tests.unit.cni.rdma.fakes import NotUsed

PF_A, PF_B = "0000:3b:00.0", "0000:5e:00.0"
VF_A0, VF_A1, VF_B0 = "0000:3b:00.2", "0000:3b:00.3", "0000:5e:00.2"


class GuidRecorder:
    """The GUID half of VfOps: records every write in order."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, int, str]] = []

    def set_node_guid(self, pf: str, vf: int, guid: str) -> None:
        self.writes.append(("node", pf, vf, guid))

    def set_port_guid(self, pf: str, vf: int, guid: str) -> None:
        self.writes.append(("port", pf, vf, guid))


def deps_with(tmp: Path, vf: object) -> Deps:
    tree = PciTree(tmp / "sys")
    tree.pf(PF_A, "ib0", numvfs=2)
    tree.vf(PF_A, 0, VF_A0, "ib2")
    tree.vf(PF_A, 1, VF_A1, "ib3")
    tree.pf(PF_B, "ib1", numvfs=1)
    tree.vf(PF_B, 0, VF_B0, "ib4")
    unused = NotUsed("adapter")
    return Deps(
        links=unused,
        netns=unused,
        probes=unused,
        vf=vf,
        rdma=unused,  # type: ignore[arg-type]
        waiter=unused,
        sysfs=Sysfs(root=tree.root),
        state_dir=tmp / "state",
    )  # type: ignore[arg-type]


def record(orig_node: str | None, orig_port: str | None) -> IbSection:
    # dpdk: GUIDs only, no rebind (vfio-bound VFs have no netdev to wait for).
    return IbSection(
        pf="ib0",
        vf_index=1,
        pci=VF_A1,
        orig_node_guid=orig_node,
        orig_port_guid=orig_port,
        dpdk=True,
        host_ifname=None,
    )


@pytest.mark.parametrize("orig", [None, "", "00:00:00:00:00:00:00:00"])
def test_an_unset_or_zero_original_guid_is_restored_as_all_f(
    tmp_path: Path, orig: str | None
) -> None:
    rec = GuidRecorder()
    restore_guid(deps_with(tmp_path, rec), record(orig, orig), timeout=1)
    assert rec.writes == [
        ("node", "ib0", 1, ALL_F_GUID),
        ("port", "ib0", 1, ALL_F_GUID),
    ]


def test_a_real_original_guid_is_restored_node_then_port(tmp_path: Path) -> None:
    rec = GuidRecorder()
    node, port = "02:C9:00:00:00:00:00:01", "02:c9:00:00:00:00:00:02"
    restore_guid(deps_with(tmp_path, rec), record(node, port), timeout=1)
    assert rec.writes == [("node", "ib0", 1, node.lower()), ("port", "ib0", 1, port)]


def test_vfs_of_one_pf_share_a_lock_key_and_other_pfs_do_not(tmp_path: Path) -> None:
    deps = deps_with(tmp_path, GuidRecorder())
    assert pf_lock_key(deps, VF_A0) == pf_lock_key(deps, VF_A1) == f"ib-pf-{PF_A}"
    assert pf_lock_key(deps, VF_B0) == f"ib-pf-{PF_B}"


def test_rebind_timeout_comes_from_the_env_with_a_sane_default() -> None:
    assert rebind_timeout({}) == DEFAULT_REBIND_TIMEOUT
    assert rebind_timeout({REBIND_TIMEOUT_ENV: "2.5"}) == 2.5
    assert rebind_timeout({REBIND_TIMEOUT_ENV: "soon"}) == DEFAULT_REBIND_TIMEOUT
    assert rebind_timeout({REBIND_TIMEOUT_ENV: "-1"}) == DEFAULT_REBIND_TIMEOUT
