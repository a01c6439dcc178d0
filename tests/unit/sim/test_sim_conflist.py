# SPDX-License-Identifier: Apache-2.0
"""The demo's conflists are shaped like Spiderpool's rendered ones."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from railyard_sim.lab import plan
from railyard_sim.pods import conflist
from railyard_sim.runtime import plugin_bin_dir


def test_roce_rail_renders_sriov_then_rdma_with_spiderpool_ipam(tmp_path: Path) -> None:
    rail = plan("beef", tmp_path, rails=2, vfs_per_pf=1, ib_rails=0).rails[1]
    conf = conflist(rail, rail.vfs[0].pci, ipv6=True, rdma=True)
    assert conf["cniVersion"] == "0.3.1"
    assert [p["type"] for p in conf["plugins"]] == ["sriov", "rdma"]
    sriov = conf["plugins"][0]
    assert (sriov["vlan"], sriov["min_tx_rate"], sriov["max_tx_rate"]) == (0, 0, 0)
    assert sriov["ipam"] == {
        "type": "spiderpool",
        "default_ipv4_ippool": ["gpu2-net12"],
        "default_ipv6_ippool": ["gpu2-net12-v6"],
    }
    assert all(p["deviceID"] == rail.vfs[0].pci for p in conf["plugins"])


def test_mtu_chains_tuning_as_spiderpool_does(tmp_path: Path) -> None:
    rail = plan("beef", tmp_path, rails=1, vfs_per_pf=1, ib_rails=0).rails[0]
    conf = conflist(rail, rail.vfs[0].pci, ipv6=False, rdma=False, mtu=4200)
    assert [p["type"] for p in conf["plugins"]] == ["sriov", "tuning"]
    assert conf["plugins"][1]["mtu"] == 4200
    assert "default_ipv6_ippool" not in conf["plugins"][0]["ipam"]


def test_ib_rail_renders_ib_sriov_with_rdma_isolation(tmp_path: Path) -> None:
    rail = plan("beef", tmp_path, rails=1, vfs_per_pf=1, ib_rails=1).rails[1]
    conf = conflist(rail, rail.vfs[0].pci, ipv6=False, rdma=True)
    [ib] = conf["plugins"]
    assert ib["type"] == "ib-sriov" and ib["rdmaIsolation"] is True
    assert ib["link_state"] == "enable"


def test_plugin_bin_dir_offers_the_cni_type_names_as_launchers_of_this_lab(
    tmp_path: Path,
) -> None:
    bins = plugin_bin_dir(tmp_path)
    assert sorted(p.name for p in bins.iterdir()) == [
        "ib-sriov",
        "railyard-ipam",
        "rdma",
        "sriov",
    ]
    script = (bins / "sriov").read_text()
    assert script.startswith(f"#!{sys.executable} -I\n")
    assert f"run('sriov', {str(tmp_path)!r})" in script
    assert os.access(bins / "sriov", os.X_OK)


def test_per_node_rail_subnets_put_the_gateway_first_and_the_pf_last(
    tmp_path: Path,
) -> None:
    subnets = ["172.16.2.0/27", "172.16.2.32/27"]
    rails = plan("beef", tmp_path, 2, 1, 0, rail_subnets=subnets).rails
    assert [
        (r.subnet_v4, r.gateway_v4, r.range_v4, r.pf_address_v4) for r in rails
    ] == [
        ("172.16.2.0/27", "172.16.2.1", "172.16.2.2-172.16.2.29", "172.16.2.30/27"),
        ("172.16.2.32/27", "172.16.2.33", "172.16.2.34-172.16.2.61", "172.16.2.62/27"),
    ]
    # without them: the cluster-wide /24 per rail, no PF address
    assert plan("beef", tmp_path, 1, 1, 0).rails[0].pf_address_v4 == ""


def test_rail_subnets_must_name_one_subnet_per_roce_rail(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one IPv4 subnet per RoCE rail"):
        plan("beef", tmp_path, 2, 1, 0, rail_subnets=["172.16.2.0/27"])
