# SPDX-License-Identifier: Apache-2.0
"""The lab builds a real veth/bridge topology and removes all of it."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from railyard_sim.lab import Lab, LabError, link_names, netns_names

pytestmark = [pytest.mark.kernel, pytest.mark.integration]


def ip_j(*args: str) -> list[dict]:
    out = subprocess.run(
        ["ip", "-j", *args], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out) if out.strip() else []


def test_down_leaves_no_netns_link_or_file_behind(tmp_path: Path) -> None:
    lab = Lab.up(tmp_path / "lab", rails=2, vfs_per_pf=2, ib_rails=1)
    # Teammates' tests build labs concurrently: only this lab's prefix counts.
    made_ns = {n for n in netns_names() if n.startswith(lab.prefix)}
    made_links = {n for n in link_names() if n.startswith(lab.prefix)}
    assert made_ns == {r.fabric_netns for r in lab.rails}
    assert len(made_links) == 3 * 3  # a PF and two VFs per rail
    lab.down()
    assert not made_ns & set(netns_names())
    assert not made_links & set(link_names())
    assert not [n for n in netns_names() + link_names() if n.startswith(lab.prefix)]
    assert list((tmp_path / "lab").iterdir()) == []
    lab.down()  # idempotent


def test_half_built_lab_is_removed_by_its_own_failure(tmp_path: Path) -> None:
    # A directory where pools.yaml must go makes the build fail late, after
    # the netns, links and tree exist.
    (tmp_path / "lab" / "pools.yaml").mkdir(parents=True)
    lab_id = secrets.token_hex(2)
    with pytest.raises(OSError):
        Lab.up(tmp_path / "lab", rails=1, vfs_per_pf=1, lab_id=lab_id)
    prefix = f"rs{lab_id}"
    assert not [n for n in netns_names() + link_names() if n.startswith(prefix)]
    assert sorted(p.name for p in (tmp_path / "lab").iterdir()) == ["pools.yaml"]


def test_a_second_lab_in_the_same_dir_is_refused(lab: Lab) -> None:
    with pytest.raises(LabError, match="already holds a lab"):
        Lab.up(lab.dir, rails=1)


def test_two_labs_coexist_with_distinct_names(tmp_path: Path, lab: Lab) -> None:
    with Lab.up(tmp_path / "second", rails=1, vfs_per_pf=1) as second:
        assert second.id != lab.id
        assert second.rail(1).pf_pci == lab.rail(1).pf_pci  # trees are per lab
        assert second.rail(1).pf_netdev != lab.rail(1).pf_netdev
    assert all(r.pf_netdev in link_names() for r in lab.rails)


def test_manifest_describes_rails_vfs_and_gateways(lab: Lab) -> None:
    raw = json.loads((lab.dir / "lab.json").read_text())
    kinds = [r["kind"] for r in raw["rails"]]
    assert kinds == ["roce", "ib"]
    rail = raw["rails"][0]
    assert rail["gateway_v4"] == "172.16.11.254"
    assert rail["subnet_v6"] == "fd00:11::/64"
    assert rail["pool_v4"] == "gpu1-net11"
    assert [v["rdma"] for v in rail["vfs"]] == ["mlx5_2", "mlx5_3"]
    assert all(len(v["netdev"]) <= 15 for r in raw["rails"] for v in r["vfs"])
    assert (lab.dir / "railyard-sim.marker").is_file()


def test_fake_tree_names_the_real_host_netdevs(lab: Lab) -> None:
    host = set(link_names())
    for r, v in lab.vfs():
        dev = lab.sys_root / "bus/pci/devices" / v.pci
        assert [p.name for p in (dev / "net").iterdir()] == [v.netdev]
        assert v.netdev in host
        assert os.readlink(dev / "physfn").endswith(r.pf_pci)
        assert [p.name for p in (dev / "infiniband").iterdir()] == [v.rdma]
    for r in lab.rails:
        pf = lab.sys_root / "bus/pci/devices" / r.pf_pci
        assert [p.name for p in (pf / "net").iterdir()] == [r.pf_netdev]
        assert (pf / "sriov_numvfs").read_text().strip() == "2"


def test_pf_stand_in_has_mtu_9000_and_vfs_start_down(lab: Lab) -> None:
    rail = lab.rail(1)
    [pf] = ip_j("link", "show", "dev", rail.pf_netdev)
    assert pf["mtu"] == 9000 and "UP" in pf["flags"]
    [vf] = ip_j("link", "show", "dev", rail.vfs[0].netdev)
    assert vf["mtu"] == 1500 and "UP" not in vf["flags"]


def test_fabric_bridge_holds_gateways_and_every_port(lab: Lab) -> None:
    for r in lab.rails:
        addrs = {
            a["local"]
            for link in ip_j("-n", r.fabric_netns, "addr", "show", "br0")
            for a in link["addr_info"]
        }
        assert {r.gateway_v4, r.gateway_v6} <= addrs
        ports = {
            p["ifname"]
            for p in ip_j("-n", r.fabric_netns, "link", "show", "master", "br0")
        }
        assert ports == {"pf", "vf0", "vf1"}


def test_vf_moved_into_a_netns_reaches_its_rail_gateway_only(
    lab: Lab, other_netns: Callable[[], str]
) -> None:
    pod = Path(other_netns()).name
    r1, r2 = lab.rail(1), lab.rail(2)
    for rail, ifname, ip in ((r1, "net1", "172.16.11.7"), (r2, "net2", "172.16.12.7")):
        vf = rail.vfs[0].netdev
        subprocess.run(["ip", "link", "set", vf, "netns", pod], check=True)
        subprocess.run(
            ["ip", "-n", pod, "link", "set", vf, "name", ifname, "up"], check=True
        )
        subprocess.run(
            ["ip", "-n", pod, "addr", "add", f"{ip}/24", "dev", ifname], check=True
        )

    def ping(src: str, dst: str) -> int:
        return subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                pod,
                "busybox",
                "ping",
                "-c",
                "1",
                "-W",
                "2",
                "-I",
                src,
                dst,
            ],
            capture_output=True,
            check=False,
        ).returncode

    assert ping("172.16.11.7", r1.gateway_v4) == 0
    assert ping("172.16.12.7", r2.gateway_v4) == 0
    # The rails are separate fabrics: rail 2's gateway is not behind net1.
    subprocess.run(
        ["ip", "-n", pod, "addr", "add", "172.16.12.9/32", "dev", "net1"], check=True
    )
    subprocess.run(
        [
            "ip",
            "-n",
            pod,
            "route",
            "add",
            "172.16.12.254/32",
            "dev",
            "net1",
            "table",
            "77",
        ],
        check=True,
    )
    subprocess.run(
        [
            "ip",
            "-n",
            pod,
            "rule",
            "add",
            "from",
            "172.16.12.9",
            "lookup",
            "77",
            "pref",
            "100",
        ],
        check=True,
    )
    assert ping("172.16.12.9", r2.gateway_v4) != 0


def test_pools_yaml_is_spiderippool_v2beta1(lab: Lab) -> None:
    yaml = pytest.importorskip("yaml")
    docs = list(yaml.safe_load_all(lab.pools_file.read_text()))
    assert [d["metadata"]["name"] for d in docs] == [
        "gpu1-net11",
        "gpu1-net11-v6",
        "gpu2-net12",
        "gpu2-net12-v6",
    ]
    v4 = docs[0]
    assert v4["apiVersion"] == "spiderpool.spidernet.io/v2beta1"
    assert v4["kind"] == "SpiderIPPool"
    assert v4["spec"] == {
        "ipVersion": 4,
        "subnet": "172.16.11.0/24",
        "ips": ["172.16.11.1-172.16.11.200"],
        "gateway": "172.16.11.254",
    }
    assert docs[1]["spec"]["gateway"] == "fd00:11::fe"


def test_lab_builds_inside_a_private_netns_without_touching_the_caller_one(
    tmp_path: Path,
) -> None:
    code = (
        "import sys, json; from railyard_sim.lab import Lab, link_names; "
        "lab = Lab.up(sys.argv[1], rails=1, vfs_per_pf=1); "
        "print(json.dumps([lab.prefix, link_names()])); lab.down()"
    )
    out = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", code, str(tmp_path / "lab")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    prefix, inside = json.loads(out)
    assert f"{prefix}p1" in inside and f"{prefix}r1v0" in inside
    assert not [n for n in link_names() if n.startswith(prefix)]
    assert not [n for n in netns_names() if n.startswith(prefix)]


def test_an_id_in_use_is_refused_without_harming_its_lab(
    tmp_path: Path, lab: Lab
) -> None:
    with pytest.raises(LabError, match="in use"):
        Lab.up(tmp_path / "twin", rails=1, vfs_per_pf=1, lab_id=lab.id)
    assert {r.fabric_netns for r in lab.rails} <= set(netns_names())
    assert all(r.pf_netdev in link_names() for r in lab.rails)
    assert not (tmp_path / "twin" / "lab.json").exists()
