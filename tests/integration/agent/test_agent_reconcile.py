# SPDX-License-Identifier: Apache-2.0
"""The node agent's reconcile on the simulated host: no leak survives a missed DEL.

The lab's agent runs its reconcile every ``INTERVAL`` seconds over the records
the runtime's plugins write. Each case breaks an attachment the way a
crashed or forgetful runtime does, never calls DEL, and waits for the agent:
within two intervals the VF must be home with its name and MAC, the address
released in ipamd and the record gone. ADDs and DELs that run while passes
run (seeded timing) must come through untouched.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cni.agent import reconcile_metrics
from railyard_sim import agent, daemon
from railyard_sim.lab import Lab, ip_json, netns_name_of
from railyard_sim.recording import (
    RecordingVfOps,
    host_netdev,
    rdma_location,
    read_state,
)
from railyard_sim.runtime import Attachment, plugin_bin_dir
from tests.doubles.cri_runtime import FakeSandbox, serve_cri
from tests.doubles.lab_ipamd import allocations, lab_with_ipamd, warm_runtime
from tests.doubles.sriov_lab import link

pytestmark = pytest.mark.integration

INTERVAL = 0.5
#: Two intervals with the pause's jitter (+-20%), plus the time one pass takes
#: on a loaded 2-core CI host (a DEL run in-process, ~0.1-0.3 s here).
TWO_INTERVALS = 2 * INTERVAL * 1.2 + 1.0
NETWORK = "gpu1-sriov"
#: The race test's passes: back to back, so ADDs and DELs run during them.
RACE_INTERVAL = 0.2


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with lab_with_ipamd(tmp_path, rails=1, vfs_per_pf=3) as lab:
        agent.start(lab.dir, reconcile_interval=INTERVAL, state_dir=tmp_path / "state")
        try:
            yield lab
        finally:
            agent.stop(lab.dir, sig=signal.SIGKILL)


def conflist(lab: Lab, vf: int) -> dict[str, Any]:
    r = lab.rail(1)
    return {
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {
                "type": "sriov",
                "deviceID": r.vfs[vf].pci,
                "detectionWindowMs": 50,
                "ipam": {"type": "spiderpool", "default_ipv4_ippool": [r.pool_v4]},
            }
        ],
    }


def held_by(lab: Lab, cid: str) -> list[dict[str, Any]]:
    return [a for a in allocations(lab) if a.get("containerID") == cid]


def records_of(state: Path, cid: str) -> list[Path]:
    return [p for p in state.rglob(f"{cid}-*.json")]


def repaired_within(
    lab: Lab, state: Path, cid: str, vf: int, mac: str, seconds: float
) -> float:
    """Seconds until the VF is home as its host name with its MAC, the address
    released and the record gone; fails after ``seconds``."""
    netdev = lab.rail(1).vfs[vf].netdev
    start = time.monotonic()
    while True:
        home = link(netdev)
        done = (
            home is not None
            and home["address"] == mac
            and not held_by(lab, cid)
            and not records_of(state, cid)
        )
        elapsed = time.monotonic() - start
        if done:
            return elapsed
        assert elapsed < seconds, (
            f"{cid} not repaired within {seconds:.1f}s: VF {home and home['address']}, "
            f"held {held_by(lab, cid)}, records {records_of(state, cid)}; agent log:\n"
            + agent_log(lab)[-3000:]
        )
        time.sleep(0.05)


def agent_log(lab: Lab) -> str:
    return (lab.dir / agent.DIR / agent.LOG).read_text(errors="replace")


def repairs(state: Path) -> dict[str, int]:
    return reconcile_metrics.ReconcileStats.load(
        state / reconcile_metrics.STATS_FILE
    ).repairs


def test_a_pods_netns_deleted_without_a_del_is_repaired(
    lab: Lab, make_netns: Callable[[], str], tmp_path: Path
) -> None:
    mac = link(lab.rail(1).vfs[0].netdev)["address"]
    rt = warm_runtime(lab, tmp_path)
    pod = make_netns()
    rt.add(conflist(lab, 0), Attachment("cnetns", pod, "net1"))
    assert held_by(lab, "cnetns")

    # The runtime crashed after tearing the sandbox down: the netns is gone
    # (the VF falls back to the host as net1, as real hardware does), no DEL.
    lab.vanish_netns(pod, "net1")
    took = repaired_within(lab, tmp_path / "state", "cnetns", 0, mac, TWO_INTERVALS)
    assert link("net1") is None
    assert repairs(tmp_path / "state") == {"netns-gone": 1}
    assert "reconcile: finished cnetns/net1 of network gpu1-sriov" in agent_log(lab)
    print(f"netns-gone repaired in {took:.2f}s")


def test_a_vf_back_in_the_host_under_its_pod_name_is_repaired(
    lab: Lab, make_netns: Callable[[], str], tmp_path: Path
) -> None:
    mac = link(lab.rail(1).vfs[1].netdev)["address"]
    rt = warm_runtime(lab, tmp_path)
    pod = make_netns()
    rt.add(conflist(lab, 1), Attachment("cvfhome", pod, "net1"))

    # The VF turns up in the host as net1 while the recorded netns path names
    # a namespace that lives (the path reused): only the VF gives it away.
    subprocess.run(
        ["ip", "-n", netns_name_of(pod), "link", "set", "net1", "netns", "1"],
        check=True,
    )
    assert link("net1") is not None
    took = repaired_within(lab, tmp_path / "state", "cvfhome", 1, mac, TWO_INTERVALS)
    assert link("net1") is None
    assert repairs(tmp_path / "state") == {"vf-in-host": 1}
    print(f"vf-in-host repaired in {took:.2f}s")


def test_a_record_left_by_a_plugin_killed_mid_add_is_repaired(
    lab: Lab, make_netns: Callable[[], str], tmp_path: Path
) -> None:
    vf = lab.rail(1).vfs[2]
    mac = link(vf.netdev)["address"]
    pod = make_netns()
    conf = conflist(lab, 2)
    plugin = {**conf["plugins"][0], "cniVersion": "1.0.0", "name": NETWORK}
    plugin["detectionWindowMs"] = 4000  # the kill lands with the VF in the pod
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CNI_")},
        **daemon.client_env(lab.dir),
        "RAILYARD_STATE_DIR": str(tmp_path / "state"),
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "ckilled",
        "CNI_NETNS": pod,
        "CNI_IFNAME": "net1",
        "CNI_PATH": str(plugin_bin_dir(lab.dir)),
    }
    # The plugin run directly (a runtime exec'ing it with no agent), killed.
    proc = subprocess.Popen(
        [str(plugin_bin_dir(lab.dir) / "sriov")],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(plugin).encode())
    proc.stdin.close()
    try:
        deadline = time.monotonic() + 20
        while link("net1", pod) is None or not held_by(lab, "ckilled"):
            assert time.monotonic() < deadline and proc.poll() is None, "no ADD"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert records_of(tmp_path / "state", "ckilled")

    # The runtime saw ADD fail and dropped the sandbox, netns and all, and
    # never ran DEL (it crashed too).
    lab.vanish_netns(pod, "net1")
    took = repaired_within(lab, tmp_path / "state", "ckilled", 2, mac, TWO_INTERVALS)
    assert repairs(tmp_path / "state") == {"netns-gone": 1}
    print(f"killed mid-ADD repaired in {took:.2f}s")


def k8s_pod(name: str) -> dict[str, str]:
    """CNI_ARGS of a Kubernetes pod, as multus passes them."""
    return {
        "IgnoreUnknown": "true",
        "K8S_POD_NAMESPACE": "default",
        "K8S_POD_NAME": name,
        "K8S_POD_INFRA_CONTAINER_ID": name,
    }


def test_a_sandbox_the_runtime_no_longer_knows_is_repaired(
    tmp_path: Path, make_netns: Callable[[], str]
) -> None:
    """With a CRI runtime (played by ``serve_cri``): the runtime lost one pod's
    sandbox while its netns lives on; once the record is older than the
    minimum age that attachment is finished, the other pod is not."""
    min_age = 1.0
    state = tmp_path / "state"
    known = [FakeSandbox("clive", "live-0"), FakeSandbox("clost", "lost-0")]
    with (
        lab_with_ipamd(tmp_path, rails=1, vfs_per_pf=2) as lab,
        serve_cri(lambda: known) as runtime,
    ):
        agent.start(
            lab.dir,
            reconcile_interval=INTERVAL,
            state_dir=state,
            cri_socket=runtime,
            sandbox_min_age=min_age,
        )
        try:
            rt = warm_runtime(lab, tmp_path)
            mac = link(lab.rail(1).vfs[1].netdev)["address"]
            live = Attachment("clive", make_netns(), "net1", k8s_pod("live-0"))
            rt.add(conflist(lab, 0), live)
            lost = Attachment("clost", make_netns(), "net1", k8s_pod("lost-0"))
            rt.add(conflist(lab, 1), lost)
            time.sleep(min_age + 2 * INTERVAL)
            assert held_by(lab, "clost"), "repaired while the runtime knew it"
            known.pop()  # the runtime lost it (its state wiped), no DEL
            repaired_within(lab, state, "clost", 1, mac, TWO_INTERVALS)
            assert repairs(state) == {"sandbox-gone": 1}
            rt.check(conflist(lab, 0), live)
            assert "container runtime containerd v1.7.24" in agent_log(lab)
        finally:
            agent.stop(lab.dir, sig=signal.SIGKILL)


def test_an_rdma_chain_is_repaired_rdma_device_and_all(
    lab: Lab, make_netns: Callable[[], str], tmp_path: Path
) -> None:
    """``[sriov, rdma]``: the RDMA device comes home too, both records go."""
    vf = lab.rail(1).vfs[0]
    mac = link(vf.netdev)["address"]
    conf = conflist(lab, 0)
    conf["plugins"].append({"type": "rdma", "deviceID": vf.pci})
    rt = warm_runtime(lab, tmp_path)
    pod = make_netns()
    rt.add(conf, Attachment("cchain", pod, "net1"))
    assert rdma_location(lab.dir, vf.rdma) == pod
    assert (tmp_path / "state" / "rdma" / "cchain-net1.json").exists()

    lab.vanish_netns(pod, "net1")
    repaired_within(lab, tmp_path / "state", "cchain", 0, mac, TWO_INTERVALS)
    assert rdma_location(lab.dir, vf.rdma) is None
    assert repairs(tmp_path / "state") == {"netns-gone": 1}


@pytest.mark.parametrize("seed", [int(os.environ.get("RAILYARD_RACE_SEED", "2412"))])
def test_adds_and_dels_during_passes_are_untouched(
    lab: Lab, make_netns: Callable[[], str], tmp_path: Path, seed: int
) -> None:
    """Pods come and go on two VFs at seeded moments while passes run back to
    back (every 0.2 s) and one gone attachment waits on the third VF: every
    ADD stays intact (CHECK) until its DEL, every DEL succeeds, only the gone
    one is repaired."""
    rng = random.Random(seed)
    state = tmp_path / "state"
    agent.stop(lab.dir)
    agent.start(lab.dir, reconcile_interval=RACE_INTERVAL, state_dir=state)
    rt = warm_runtime(lab, tmp_path)
    mac = link(lab.rail(1).vfs[2].netdev)["address"]
    doomed = make_netns()
    rt.add(conflist(lab, 2), Attachment("cdoomed", doomed, "net1"))
    lab.vanish_netns(doomed, "net1")
    for cycle in range(6):
        vf = cycle % 2
        att = Attachment(f"crace{cycle}", make_netns(), "net1")
        time.sleep(rng.uniform(0, RACE_INTERVAL))
        rt.add(conflist(lab, vf), att)
        time.sleep(rng.uniform(0, RACE_INTERVAL))
        rt.check(conflist(lab, vf), att)  # still as ADD left it
        assert held_by(lab, att.container_id), f"seed {seed} cycle {cycle}"
        rt.delete(conflist(lab, vf), att)
        assert not held_by(lab, att.container_id)
    repaired_within(lab, state, "cdoomed", 2, mac, TWO_INTERVALS)
    assert repairs(state) == {"netns-gone": 1}, f"seed {seed}"
    assert "crace" not in "".join(
        line for line in agent_log(lab).splitlines() if "reconcile: finished" in line
    )


GRACE = 2.0


def allocate_without_attachment(lab: Lab, cid: str) -> None:
    """An address ipamd holds for this node that no attachment on it explains
    (an ADD whose pod never reached the node, a record lost with a disk)."""
    from ipamd.api.v1 import ipam_pb2 as pb
    from ipamd.client import IpamdClient

    with IpamdClient(str(daemon.socket_path(lab.dir)), timeout=5) as client:
        client.allocate(
            pb.AllocateRequest(
                network=NETWORK,
                container_id=cid,
                ifname="net1",
                node=os.environ.get("RAILYARD_NODE_NAME") or socket.gethostname(),
                ipv4_pools=[lab.rail(1).pool_v4],
            )
        )


def test_ipamd_releases_what_no_attachment_explains_after_its_grace_not_before(
    tmp_path: Path,
) -> None:
    with lab_with_ipamd(
        tmp_path, node_reconcile_grace=GRACE, rails=1, vfs_per_pf=1
    ) as lab:
        pod = lab.netns_name("rgrace")
        subprocess.run(["ip", "netns", "add", pod], check=True)
        agent.start(lab.dir, reconcile_interval=INTERVAL, state_dir=tmp_path / "state")
        try:
            rt = warm_runtime(lab, tmp_path)
            live = Attachment("clive", f"/var/run/netns/{pod}", "net1")
            rt.add(conflist(lab, 0), live)
            allocate_without_attachment(lab, "cghost")
            made = time.monotonic()
            while time.monotonic() - made < GRACE - 0.3:
                assert held_by(lab, "cghost"), "released before the grace period"
                time.sleep(0.1)
            while held_by(lab, "cghost"):
                assert time.monotonic() - made < GRACE + TWO_INTERVALS, (
                    "not released after the grace period:\n" + agent_log(lab)[-2000:]
                )
                time.sleep(0.1)
            assert held_by(lab, "clive")
            assert "ipamd released" in agent_log(lab)

            # A node that stops reporting (its agent gone) loses nothing.
            agent.stop(lab.dir, sig=signal.SIGKILL)
            allocate_without_attachment(lab, "csilent")
            time.sleep(GRACE + 2 * INTERVAL)
            assert held_by(lab, "csilent") and held_by(lab, "clive")
        finally:
            agent.stop(lab.dir, sig=signal.SIGKILL)
            subprocess.run(
                ["ip", "netns", "del", pod], check=False, capture_output=True
            )


def one_pass(lab: Lab, state: Path) -> subprocess.Popen[str]:
    """A reconcile pass of its own (``railyard_sim.agent --reconcile-once``)."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "railyard_sim.agent", "--lab", str(lab.dir),
            "--state-dir", str(state), "--reconcile-once",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def back_from_a_dead_netns(lab: Lab, pci: str) -> None:
    """What the kernel does for a real VF that a killed pass left in the DEL's
    temporary netns (its rename back goes through one): that netns dies with
    the process and the VF falls back to the host. A veth stand-in dies with
    it instead, so the lab's driver rebind brings the VF's netdev back."""
    port = read_state(lab.dir)["ports"][pci]
    # The kernel tears a dead netns down a moment later (a work queue):
    # wait until the stand-in is in the host or gone with it.
    deadline = time.monotonic() + 10
    while host_netdev(lab.dir, pci) is None:
        if not ip_json(
            ["link", "show", "dev", port["peer"]], netns=port["fabric_netns"]
        ):
            RecordingVfOps(lab.dir).rebind(pci)
            return
        assert time.monotonic() < deadline, f"VF {pci} neither home nor gone"
        time.sleep(0.02)


@pytest.mark.parametrize("seed", [int(os.environ.get("RAILYARD_KILL_SEED", "2424"))])
def test_a_pass_killed_at_any_point_leaves_what_the_next_pass_finishes(
    tmp_path: Path, seed: int
) -> None:
    """SIGKILL of a pass at seeded moments of its run (spread over the time a
    whole pass takes on this host: its start, its judging, the DEL's steps,
    its ipamd report), and once at a fixed point (the VF home, the release
    waiting on a stopped ipamd); then one whole pass: nothing is left."""
    rng = random.Random(seed)
    state = tmp_path / "state"
    with lab_with_ipamd(tmp_path, rails=1, vfs_per_pf=1) as lab:
        agent.start(lab.dir, reconcile_interval=0, state_dir=state)
        rt = warm_runtime(lab, tmp_path)
        vf = lab.rail(1).vfs[0]
        mac = link(vf.netdev)["address"]

        def gone_attachment(n: int) -> str:
            pod = lab.netns_name(f"rk{n}")
            subprocess.run(["ip", "netns", "add", pod], check=True)
            cid = f"ckill{n}"
            rt.add(conflist(lab, 0), Attachment(cid, f"/var/run/netns/{pod}", "net1"))
            lab.vanish_netns(f"/var/run/netns/{pod}", "net1")
            return cid

        def finish(cid: str, label: str) -> None:
            finishing = one_pass(lab, state)
            _, err = finishing.communicate(timeout=60)
            assert finishing.returncode == 0, f"{label}: {err[-2000:]}"
            repaired_within(lab, state, cid, 0, mac, 0.1)
            assert not list(state.rglob(".*.tmp")), label

        try:
            cid = gone_attachment(0)
            started = time.monotonic()
            finish(cid, "a whole pass")
            whole = time.monotonic() - started
            for n in range(1, 5):
                cid = gone_attachment(n)
                killed = one_pass(lab, state)
                delay = rng.uniform(0.2 * whole, whole)
                try:
                    killed.wait(delay)
                except subprocess.TimeoutExpired:
                    killed.kill()
                killed.communicate()
                back_from_a_dead_netns(lab, vf.pci)
                finish(cid, f"seed {seed}: killed at {delay:.2f}s of {whole:.2f}s")

            cid = gone_attachment(5)
            ipamd = daemon.running_pid(lab.dir)
            assert ipamd is not None
            os.kill(ipamd, signal.SIGSTOP)
            try:
                killed = one_pass(lab, state)
                deadline = time.monotonic() + 30
                while link(vf.netdev) is None:  # the DEL put the VF home
                    assert time.monotonic() < deadline and killed.poll() is None
                    time.sleep(0.02)
                killed.kill()
                killed.communicate()
            finally:
                os.kill(ipamd, signal.SIGCONT)
            assert held_by(lab, cid) and records_of(state, cid)
            finish(cid, "killed while the release waited on ipamd")
        finally:
            agent.stop(lab.dir, sig=signal.SIGKILL)
