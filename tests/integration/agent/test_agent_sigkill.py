# SPDX-License-Identifier: Apache-2.0
"""The agent SIGKILLed in the middle of an ADD or a DEL, on the simulated host
with real netns.

The kill takes the agent's whole process group (what systemd and the kubelet
do to a container): the worker running the command dies mid-way (for DEL: at
a fixed point, ipamd stalled after the VF came home, and at 20 seeded random
moments; for a ``[sriov, rdma]`` chain, at seeded moments of its ADD or DEL).
The runtime's next calls, DEL then ADD again, must complete with nothing left
behind: the VF back in the host with its name and MAC, its RDMA device too, no
address held in ipamd, no record on disk. While the agent is down the shims
run the plugin directly.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from railyard_sim import agent, daemon
from railyard_sim.lab import Lab
from railyard_sim.recording import rdma_location
from railyard_sim.runtime import Attachment, PluginError
from tests.doubles.lab_ipamd import (
    allocations,
    lab_with_ipamd,
    sriov_conf,
    warm_runtime,
)
from tests.doubles.sriov_lab import link

pytestmark = pytest.mark.integration


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with lab_with_ipamd(tmp_path, rails=1, vfs_per_pf=1) as lab:
        agent.start(lab.dir)
        try:
            yield lab
        finally:
            agent.stop(lab.dir, sig=signal.SIGKILL)


@pytest.fixture
def pod(lab: Lab) -> Iterator[str]:
    name = lab.netns_name(f"k{os.urandom(3).hex()}")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield f"/var/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_agent_killed_mid_add_then_del_and_add_again_leave_nothing_behind(
    lab: Lab, pod: str, tmp_path: Path
) -> None:
    r = lab.rail(1)
    vf = r.vfs[0]
    before = link(vf.netdev)
    assert before is not None
    # A long detection window: the kill lands while the VF is in the pod with
    # its address on it.
    conf = sriov_conf(lab, window_ms=4000)
    rt = warm_runtime(lab, tmp_path)
    att = Attachment("ckill", pod, "net1")

    with ThreadPoolExecutor(1) as pool:
        adding = pool.submit(rt.add, conf, att)
        deadline = time.monotonic() + 20
        while link("net1", pod) is None or not allocations(lab):
            assert time.monotonic() < deadline, "ADD never reached the pod"
            assert not adding.done(), adding.exception()
            time.sleep(0.05)
        agent_pid = agent.running_pid(lab.dir)
        assert agent_pid is not None
        os.killpg(agent_pid, signal.SIGKILL)
        with pytest.raises(PluginError) as failed:
            adding.result(timeout=30)
    assert failed.value.code == 999  # the worker died: no result
    # What it left: the VF in the pod, an address held, the record for DEL.
    assert link("net1", pod) is not None and allocations(lab)
    assert any((tmp_path / "state").rglob("*ckill*"))

    # The runtime's DEL; the agent is gone, so the shim runs the plugin directly.
    done = rt.exec_plugin(
        "sriov",
        "DEL",
        {**conf["plugins"][0], "cniVersion": "1.0.0", "name": "gpu1-sriov"},
        att,
    )
    assert done == {}
    assert link("net1", pod) is None
    after = link(vf.netdev)
    assert after is not None and after["address"] == before["address"]
    assert allocations(lab) == []
    assert not any((tmp_path / "state").rglob("*ckill*"))

    # The agent back (its start-up is the only wait), ADD again works warm.
    agent.start(lab.dir)
    result = rt.add(
        {**conf, "plugins": [{**conf["plugins"][0], "detectionWindowMs": 100}]}, att
    )
    assert result["interfaces"][0]["name"] == "net1"
    assert link("net1", pod) is not None
    rt.delete(
        {**conf, "plugins": [{**conf["plugins"][0], "detectionWindowMs": 100}]}, att
    )
    assert link(vf.netdev) is not None and allocations(lab) == []


def assert_all_home(lab: Lab, pod: str, vf_mac: str, tmp_path: Path) -> None:
    """The VF in the host with its MAC, nothing in the pod, no address, no record."""
    assert link("net1", pod) is None
    home = link(lab.rail(1).vfs[0].netdev)
    assert home is not None and home["address"] == vf_mac
    assert allocations(lab) == []
    assert not [p for p in (tmp_path / "state").rglob("*.json")]


def test_agent_killed_mid_del_while_ipamd_stalls_then_del_again_finishes(
    lab: Lab, pod: str, tmp_path: Path
) -> None:
    """A deterministic point: DEL has put the VF home and waits on the
    address's release (ipamd stopped) when the agent's group is killed."""
    vf_mac = link(lab.rail(1).vfs[0].netdev)["address"]
    conf = sriov_conf(lab, window_ms=100)
    rt = warm_runtime(lab, tmp_path)
    att = Attachment("cdel", pod, "net1")
    rt.add(conf, att)
    assert allocations(lab)

    ipamd = daemon.running_pid(lab.dir)
    assert ipamd is not None
    os.kill(ipamd, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(1) as pool:
            deleting = pool.submit(rt.delete, conf, att)
            deadline = time.monotonic() + 20
            while link("net1", pod) is not None:  # the VF leaves the pod first
                assert time.monotonic() < deadline, "DEL never took the VF back"
                assert not deleting.done(), deleting.exception()
                time.sleep(0.02)
            agent_pid = agent.running_pid(lab.dir)
            assert agent_pid is not None
            os.killpg(agent_pid, signal.SIGKILL)
            with pytest.raises(PluginError):
                deleting.result(timeout=30)
    finally:
        os.kill(ipamd, signal.SIGCONT)
    # What it left: the VF home, the address held, the record saying so.
    assert link(lab.rail(1).vfs[0].netdev) is not None
    assert allocations(lab)
    assert any((tmp_path / "state").rglob("*cdel*"))

    rt.delete(conf, att)  # the runtime's retry, direct mode (no agent)
    assert_all_home(lab, pod, vf_mac, tmp_path)

    agent.start(lab.dir)
    rt.add(conf, att)
    rt.delete(conf, att)
    assert_all_home(lab, pod, vf_mac, tmp_path)


@contextmanager
def failing_as(label: str) -> Iterator[None]:
    """An assertion failing inside names ``label`` (the seeded point to rerun)."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(label) from exc


def finished_despite_a_kill(
    lab: Lab, delay: float, command: Callable[..., object], *args: object
) -> bool:
    """Run ``command(*args)`` (a runtime's ADD or DEL) and SIGKILL the agent's
    group ``delay`` s into it: True when the command completed anyway, False
    when the kill failed it."""
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(command, *args)
        time.sleep(delay)
        agent_pid = agent.running_pid(lab.dir)
        assert agent_pid is not None
        os.killpg(agent_pid, signal.SIGKILL)
        try:
            running.result(timeout=30)
        except PluginError:
            return False
    return True


#: Delays (s) after a DEL starts at which the agent's group is killed; seeded
#: so a failure names a point that can be run again.
KILL_SEED = 20261203
KILL_POINTS = 20


def test_agent_killed_at_random_points_of_del_then_del_again_finishes(
    lab: Lab, pod: str, tmp_path: Path
) -> None:
    rng = random.Random(KILL_SEED)
    vf_mac = link(lab.rail(1).vfs[0].netdev)["address"]
    conf = sriov_conf(lab, window_ms=100)
    rt = warm_runtime(lab, tmp_path)
    outcomes = {"finished": 0, "killed": 0}
    for point in range(KILL_POINTS):
        delay = rng.uniform(0.0, 0.08)
        att = Attachment(f"ck{point}", pod, "net1")
        rt.add(conf, att)
        if finished_despite_a_kill(lab, delay, rt.delete, conf, att):
            outcomes["finished"] += 1
        else:
            outcomes["killed"] += 1
        rt.delete(conf, att)  # the runtime's next DEL, direct mode
        with failing_as(f"seed {KILL_SEED} point {point} ({delay:.3f}s)"):
            assert_all_home(lab, pod, vf_mac, tmp_path)
        agent.start(lab.dir)
    # both sides of the race were exercised, not only kills after DEL ended
    assert outcomes["killed"] > 0, outcomes


def rdma_chain_conf(lab: Lab) -> dict[str, Any]:
    """Rail 1's first VF and its RDMA device: ``[sriov (ipamd), rdma]``."""
    conf = sriov_conf(lab, window_ms=100)
    rdma = {"type": "rdma", "deviceID": lab.rail(1).vfs[0].pci}
    return {**conf, "name": "gpu1-rdma", "plugins": [*conf["plugins"], rdma]}


def test_agent_killed_at_random_points_of_an_rdma_chain_leaves_nothing_behind(
    lab: Lab, pod: str, tmp_path: Path
) -> None:
    """``[sriov, rdma]`` through the agent, its group killed at seeded moments
    of the chain's ADD or of its DEL: the runtime's next DEL (direct mode)
    brings the VF and its RDMA device home and releases the address."""
    rng = random.Random(KILL_SEED + 1)
    vf = lab.rail(1).vfs[0]
    vf_mac = link(vf.netdev)["address"]
    conf = rdma_chain_conf(lab)
    rt = warm_runtime(lab, tmp_path)
    outcomes = {(phase, end): 0 for phase in ("ADD", "DEL") for end in ("ok", "kill")}
    for point in range(KILL_POINTS):
        phase = "ADD" if point % 2 == 0 else "DEL"
        # A warm chain's ADD takes ~0.1 s here, its DEL ~0.06 s.
        delay = rng.uniform(0.0, 0.15 if phase == "ADD" else 0.07)
        att = Attachment(f"cr{point}", pod, "net1")
        if phase == "DEL":
            rt.add(conf, att)
            assert rdma_location(lab.dir, vf.rdma) == pod
        command = rt.add if phase == "ADD" else rt.delete
        finished = finished_despite_a_kill(lab, delay, command, conf, att)
        outcomes[phase, "ok" if finished else "kill"] += 1
        rt.delete(conf, att)  # the runtime's next DEL, direct mode
        label = f"seed {KILL_SEED + 1} point {point}: {phase} killed after {delay:.3f}s"
        with failing_as(label):
            assert rdma_location(lab.dir, vf.rdma) is None
            assert_all_home(lab, pod, vf_mac, tmp_path)
        agent.start(lab.dir)
    assert outcomes["ADD", "kill"] > 0 and outcomes["DEL", "kill"] > 0, outcomes
