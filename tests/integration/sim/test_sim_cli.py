# SPDX-License-Identifier: Apache-2.0
"""``railyard-sim`` as an operator runs it: up, pod, show, unpod, down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from railyard_sim.lab import link_names, netns_names
from railyard_sim.recording import Faults

pytestmark = [pytest.mark.kernel, pytest.mark.integration]

SIM = [sys.executable, "-m", "railyard_sim.cli"]
IPAMD = str(Path(sys.executable).parent / "ipamd")


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SIM, *args], capture_output=True, text=True, check=False, timeout=300
    )


def lab_id(lab: Path) -> str:
    return json.loads((lab / "lab.json").read_text())["lab_id"]


def test_up_serves_the_lab_pools_and_down_removes_everything(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    up = sim(
        "up", "--lab", str(lab), "--rails", "1", "--ib-rails", "1", "--vfs-per-pf", "1"
    )
    prefix = f"rs{lab_id(lab)}" if (lab / "lab.json").exists() else None
    try:
        assert up.returncode == 0, up.stderr
        pid = int((lab / "ipamd.pid").read_text())
        listed = subprocess.run(
            [IPAMD, "pool", "list", "--json", "--socket", str(lab / "ipamd.sock")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "gpu1-net11" in listed and "gpu2-net12-v6" in listed
        assert "[railyard-sim" in up.stderr  # progress on stderr
        # A copy-paste environment for a hand-run plugin, and each PF's MTU.
        assert f"export CNI_PATH={lab / 'cni-bin'}:" in up.stdout
        assert f"export RAILYARD_IPAMD_SOCKET={lab / 'ipamd.sock'}" in up.stdout
        assert f"export RAILYARD_STATE_DIR={lab / 'state'}" in up.stdout
        assert up.stdout.count("mtu 9000") == 2
    finally:
        down = sim("down", "--lab", str(lab))
    assert down.returncode == 0, down.stderr
    assert not lab.exists()
    assert not os.path.exists(f"/proc/{pid}")
    assert prefix and not [
        n for n in netns_names() + link_names() if n.startswith(prefix)
    ]


def test_down_of_a_missing_lab_succeeds(tmp_path: Path) -> None:
    assert sim("down", "--lab", str(tmp_path / "none")).returncode == 0


def test_pod_on_a_missing_lab_fails_with_a_message(tmp_path: Path) -> None:
    res = sim("pod", "p", "--lab", str(tmp_path / "none"))
    assert res.returncode == 1
    assert "no lab here" in res.stderr


def _pod_cycle(
    tmp_path: Path, rails: str, ib_rails: str, nics: int, *pod_args: str
) -> list[str]:
    """up, pod p1, show, unpod, down; the journal's ops before down."""
    lab = tmp_path / "lab"
    up = sim(
        "up",
        "--lab",
        str(lab),
        "--rails",
        rails,
        "--ib-rails",
        ib_rails,
        "--vfs-per-pf",
        "1",
    )
    assert up.returncode == 0, up.stderr
    try:
        manifest = json.loads((lab / "lab.json").read_text())
        pod = sim("pod", "p1", "--lab", str(lab), "--rdma", "--ipv6", *pod_args)
        assert pod.returncode == 0, pod.stderr
        show = sim("show", "p1", "--lab", str(lab))
        assert show.returncode == 0, show.stdout + show.stderr
        for n, rail in enumerate(manifest["rails"], start=1):
            octet = 10 + n
            assert f"172.16.{octet}.1/24" in show.stdout
            assert f"fd00:{octet}::1/64" in show.stdout
            assert f"-> {rail['gateway_v4']}" in show.stdout
            assert f"{rail['vfs'][0]['rdma']}" in show.stdout
        assert show.stdout.count(" ok") == 2 * nics
        assert "FAILED" not in show.stdout
        assert show.stdout.count("in pod netns") == nics
        unpod = sim("unpod", "p1", "--lab", str(lab))
        assert unpod.returncode == 0, unpod.stdout + unpod.stderr
        host = link_names()
        ops = [json.loads(line)["op"] for line in open(lab / "journal.log")]
        # Back under the lab's names, also an IB VF renamed by a rebind.
        assert all(r["vfs"][0]["netdev"] in host for r in manifest["rails"])
    finally:
        down = sim("down", "--lab", str(lab))
    assert down.returncode == 0, down.stderr
    return ops


def test_pod_on_an_ib_rail_sets_a_guid_and_moves_the_rdma_device(
    tmp_path: Path,
) -> None:
    ops = _pod_cycle(tmp_path, "1", "1", 2, "--ib-guid")
    # ADD sets the GUID and rebinds; DEL restores the GUID and rebinds again.
    assert ops.count("set_node_guid") == 2 and ops.count("rebind") == 2
    assert ops.count("move") == 4  # two RDMA devices, in and out


def test_demo_runs_every_step_and_leaves_nothing(tmp_path: Path) -> None:
    lab = tmp_path / "demo"
    res = sim("demo", "--lab", str(lab), "--rails", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "demo passed" in res.stdout
    assert "net2" in res.stdout
    assert not lab.exists()


def test_failed_pod_is_rolled_back_and_its_addresses_released(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    up = sim("up", "--lab", str(lab), "--rails", "2", "--vfs-per-pf", "1")
    assert up.returncode == 0, up.stderr
    try:
        manifest = json.loads((lab / "lab.json").read_text())
        rail2 = manifest["rails"][1]
        Faults(lab).inject(
            "set_rate", "EOPNOTSUPP", count=1, match={"pf": rail2["pf_netdev"]}
        )
        pod = sim("pod", "p1", "--lab", str(lab))
        assert pod.returncode == 1
        assert "ADD net2 failed" in pod.stderr and "injected EOPNOTSUPP" in pod.stderr
        assert not (lab / "pods" / "p1.json").exists()
        assert f"rs{manifest['lab_id']}-p1" not in netns_names()
        host = link_names()
        assert all(r["vfs"][0]["netdev"] in host for r in manifest["rails"])
        pools = json.loads(
            subprocess.run(
                [IPAMD, "pool", "list", "--json", "--socket", str(lab / "ipamd.sock")],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )["pools"]
        assert sum(p["allocatedIPCount"] for p in pools) == 0
    finally:
        down = sim("down", "--lab", str(lab))
    assert down.returncode == 0, down.stderr


def test_a_shaped_lab_shows_where_each_vf_sits(tmp_path: Path) -> None:
    """up --shape split: the rails are the shape's NICs; show names each VF's
    PCIe root and NUMA node; railyard rails reads the lab's sysfs."""
    lab = tmp_path / "lab"
    up = sim("up", "--lab", str(lab), "--shape", "split", "--vfs-per-pf", "1")
    assert up.returncode == 0, up.stderr
    try:
        assert "rail 4 roce PF 0000:d8:00.0" in up.stdout
        pod = sim("pod", "p1", "--lab", str(lab), "--nics", "3", "--rdma")
        assert pod.returncode == 0, pod.stderr
        show = sim("show", "p1", "--lab", str(lab))
        assert show.returncode == 0, show.stdout + show.stderr
        assert "net1  VF 0000:19:00.2  PCIe root pci0000:17  NUMA node 0" in show.stdout
        assert "net3  VF 0000:af:00.2  PCIe root pci0000:ae  NUMA node 1" in show.stdout
        rails = subprocess.run(
            [sys.executable, "-m", "railyard", "rails", "--sysfs", str(lab / "sys")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert rails.returncode == 0, rails.stderr
        assert "GPU 0 and GPU 2 share NIC mlx5_0 (0000:19:00.0)" in rails.stdout
        assert sim("unpod", "p1", "--lab", str(lab)).returncode == 0
    finally:
        down = sim("down", "--lab", str(lab))
    assert down.returncode == 0, down.stderr
