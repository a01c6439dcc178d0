# SPDX-License-Identifier: Apache-2.0
"""Nothing of a lab outlives it: failed pods, failed demos, lost pid files, no CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from railyard_sim import daemon
from railyard_sim.lab import Lab, link_names, netns_names
from railyard_sim.recording import Faults

pytestmark = [pytest.mark.kernel, pytest.mark.integration]

SIM = [sys.executable, "-m", "railyard_sim.cli"]


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SIM, *args], capture_output=True, text=True, check=False, timeout=300
    )


def lab_processes(lab: Path) -> list[int]:
    """Every process whose command line names something in the lab directory."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(lab) in cmdline:
            found.append(int(entry.name))
    return found


def left_of(prefix: str) -> list[str]:
    return [n for n in netns_names() + link_names() if n.startswith(prefix)]


def fail_mid_pod_and_its_rollback(lab_dir: Path) -> None:
    """Rail 2's ADD fails; the rollback cannot bring rail 1's RDMA device back."""
    faults = Faults(lab_dir)
    faults.inject("set_link_state", "EBUSY", match={"state": 1})
    faults.inject("move", "EBUSY", match={"to_netns": None})


def test_demo_failing_mid_pod_leaves_no_netns_link_or_ipamd(tmp_path: Path) -> None:
    lab = tmp_path / "demo"
    lab.mkdir()
    # Faults written before `up` are kept: the demo's own pod fails.
    fail_mid_pod_and_its_rollback(lab)
    res = sim("demo", "--lab", str(lab), "--rails", "1", "--ib-rails", "1")
    found = re.search(r"^lab ([0-9a-f]{4}) in ", res.stdout, re.M)
    assert found, res.stdout + res.stderr
    prefix = f"rs{found.group(1)}"
    try:
        assert res.returncode == 1
        assert "demo FAILED" in res.stderr
        assert "ADD net2 failed" in res.stderr and "injected EBUSY" in res.stderr
        assert not left_of(prefix)
        assert lab_processes(lab) == []
        assert not lab.exists()
    finally:
        if lab.exists():
            sim("down", "--lab", str(lab))


def test_down_after_a_pod_whose_rollback_failed_removes_everything(
    tmp_path: Path,
) -> None:
    lab = tmp_path / "lab"
    up = sim("up", "--lab", str(lab), "--rails", "1", "--ib-rails", "1")
    assert up.returncode == 0, up.stderr
    manifest = json.loads((lab / "lab.json").read_text())
    prefix = f"rs{manifest['lab_id']}"
    try:
        ipamd_pid = int((lab / "ipamd.pid").read_text())
        fail_mid_pod_and_its_rollback(lab)
        pod = sim("pod", "p1", "--lab", str(lab), "--rdma")
        assert pod.returncode == 1
        assert "rollback:" in pod.stderr
        # The rollback could not finish: the pod is kept for `down` to retry.
        assert (lab / "pods" / "p1.json").exists()
        assert f"{prefix}-p1" in netns_names()
    finally:
        down = sim("down", "--lab", str(lab))
    assert down.returncode == 1
    assert "pods left problems (the lab is removed anyway)" in down.stderr
    assert not left_of(prefix)
    assert not Path(f"/proc/{ipamd_pid}").exists()
    assert lab_processes(lab) == []
    assert not lab.exists()


def test_down_with_an_unreadable_pod_record_still_removes_the_lab(
    tmp_path: Path,
) -> None:
    lab = tmp_path / "lab"
    up = sim("up", "--lab", str(lab), "--rails", "1", "--vfs-per-pf", "1")
    assert up.returncode == 0, up.stderr
    prefix = f"rs{json.loads((lab / 'lab.json').read_text())['lab_id']}"
    (lab / "pods").mkdir()
    (lab / "pods" / "broken.json").write_text("{not json")
    down = sim("down", "--lab", str(lab))
    assert down.returncode == 1 and "pod broken" in down.stderr
    assert not left_of(prefix)
    assert lab_processes(lab) == []
    assert not lab.exists()


def test_lab_down_kills_its_ipamd_when_pid_file_and_socket_are_gone(
    tmp_path: Path,
) -> None:
    lab = Lab.up(tmp_path / "lab", rails=1, vfs_per_pf=1)
    try:
        pid = daemon.start(lab.dir)
        (lab.dir / daemon.PID).unlink()
        daemon.socket_path(lab.dir).unlink()
        assert daemon.lab_pids(lab.dir) == [pid]
    finally:
        lab.down()
    assert not Path(f"/proc/{pid}").exists()
    assert not left_of(lab.prefix)
    lab.down()  # still idempotent


def test_an_ipamd_of_another_lab_path_is_never_taken_for_ours(tmp_path: Path) -> None:
    # /x/lab/ipamd.sock is a suffix of /y/x/lab/ipamd.sock: an exact match only.
    mine = tmp_path / "lab"
    theirs = tmp_path / "y" / tmp_path.relative_to("/") / "lab"
    sock = f"unix://{theirs / daemon.SOCKET}"
    # Its command line is all that counts (unix socket paths are too short
    # for a real ipamd here).
    code = "import sys, time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, "serve", "--listen", sock])
    try:
        wait_for_exec(proc.pid, sock)
        assert daemon.lab_pids(mine) == []
        daemon.stop(mine)
        assert proc.poll() is None
        assert daemon.lab_pids(theirs) == [proc.pid]
        daemon.stop(theirs)
        assert proc.poll() is not None
    finally:
        proc.kill()
        proc.wait()


def wait_for_exec(pid: int, word: str) -> None:
    """Until the child's command line is its own (right after fork it is ours)."""
    deadline = time.monotonic() + 10
    cmdline = Path(f"/proc/{pid}/cmdline")
    while word.encode() not in cmdline.read_bytes():
        assert time.monotonic() < deadline, "the child never exec'd"
        time.sleep(0.01)


def test_lab_down_removes_a_stand_in_left_in_a_foreign_netns(
    tmp_path: Path, make_netns: object
) -> None:
    pod = Path(make_netns("rm")).name  # type: ignore[operator]
    lab = Lab.up(tmp_path / "lab", rails=1, vfs_per_pf=1)
    try:
        vf = lab.rail(1).vfs[0]
        subprocess.run(["ip", "link", "set", vf.netdev, "netns", pod], check=True)
    finally:
        lab.down()
    inside = subprocess.run(
        ["ip", "-n", pod, "-o", "link"], capture_output=True, text=True, check=True
    ).stdout
    assert vf.netdev not in inside
    assert not left_of(lab.prefix)


class _Installed:
    """An installation whose railyard-sim is a launcher that can go missing."""

    def __init__(self, bin_dir: Path) -> None:
        bin_dir.mkdir()
        self.sim = bin_dir / "railyard-sim"
        self.sim.write_text(
            f'#!/bin/sh\nexec {sys.executable} -m railyard_sim.cli "$@"\n'
        )
        self.sim.chmod(0o755)
        self.ipamd = Path(sys.executable).parent / "ipamd"

    def tool(self, name: str) -> str:
        return str(self.sim if name == "railyard-sim" else self.ipamd)


def test_conformance_host_down_cleans_up_without_the_cli(tmp_path: Path) -> None:
    from conformance.railyard_host import RailyardHost

    installed = _Installed(tmp_path / "bin")
    host = RailyardHost(installed, tmp_path)
    prefix = f"rs{host.manifest['lab_id']}"
    ipamd_pid = int((host.lab / "ipamd.pid").read_text())
    try:
        assert left_of(prefix) and Path(f"/proc/{ipamd_pid}").exists()
        installed.sim.unlink()  # a partial (re)install removed the tool
    finally:
        host.down()
    assert not left_of(prefix)
    assert not Path(f"/proc/{ipamd_pid}").exists()
    assert lab_processes(host.lab) == []
    assert not host.lab.exists()
    assert os.listdir(tmp_path) == ["bin"]
