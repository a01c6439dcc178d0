# SPDX-License-Identifier: Apache-2.0
"""The VF record keeps where the VF sits, and keeps an older record's shape
when sysfs shows no topology."""

from __future__ import annotations

from cni.record.vf import VfState


def vf(**extra: object) -> VfState:
    return VfState("c1", "net1", "gpu1", "/var/run/netns/p", "0000:19:00.2", **extra)  # type: ignore[arg-type]


def test_pcie_root_and_numa_node_round_trip() -> None:
    st = vf(pcie_root="pci0000:15", numa_node=0)
    data = st.to_json()
    assert (data["pcie_root"], data["numa_node"]) == ("pci0000:15", 0)
    back = VfState.from_json(data)
    assert (back.pcie_root, back.numa_node) == ("pci0000:15", 0)


def test_without_topology_the_record_has_the_shape_older_releases_wrote() -> None:
    data = vf().to_json()
    assert "pcie_root" not in data and "numa_node" not in data
    assert (VfState.from_json(data).pcie_root, VfState.from_json(data).numa_node) == (
        "",
        None,
    )
