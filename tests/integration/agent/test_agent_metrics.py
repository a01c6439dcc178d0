# SPDX-License-Identifier: Apache-2.0
"""``railyard-agent --metrics-listen``: the node agent serves the RDMA exporter too.

The production agent runs on a fake RDMA node (records and a sysfs tree of
tests/doubles/rdma_node.py): its /metrics carries the pod's series as
railyard-exporter's do; the metrics server is a process of its own, started
again when it dies, and gone with the agent.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doubles.http_probe import free_port
from tests.doubles.http_probe import get_text as scrape
from tests.doubles.procs import children, wait_gone
from tests.doubles.rdma_node import RdmaNode

pytestmark = pytest.mark.integration

AGENT = str(Path(sys.executable).parent / "railyard-agent")


@pytest.fixture
def node(tmp_path: Path) -> RdmaNode:
    node = RdmaNode(tmp_path / "node")
    pf = node.pf(1)
    node.pod_nic(
        pf, 0, "trainer-0", namespace="team-a", counters={"out_of_sequence": 5}
    )
    return node


@pytest.fixture
def agent(
    node: RdmaNode, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """The agent with its metrics sidecar; no spare workers unless the test
    asks for some (indirect parameter), so its only child is the sidecar."""
    spares = getattr(request, "param", 0)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    proc = subprocess.Popen(
        [
            AGENT,
            "--socket", str(tmp_path / "agent" / "agent.sock"),
            "--metrics-listen", f"127.0.0.1:{port}",
            "--state-dir", str(node.state_dir),
            "--sysfs-root", str(node.root / "sys"),
            "--spare-workers", str(spares),
            # No ipamd here: the spares give up connecting at once.
            "--ipamd", str(tmp_path / "no-ipamd.sock"),
            # The fake node's records name no real VF: nothing to reconcile.
            "--reconcile-interval", "0",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def wait_children(pid: int, count: int) -> set[int]:
    deadline = time.monotonic() + 10
    while len(found := children(pid)) < count:
        assert time.monotonic() < deadline, f"{pid} has children {found}"
        time.sleep(0.02)
    return found


def test_the_agent_serves_the_pods_rdma_series(
    agent: tuple[subprocess.Popen[str], int],
) -> None:
    proc, port = agent
    text = scrape(port)
    assert "rdma_out_of_sequence_total{node_name=" in text
    line = next(
        line
        for line in text.splitlines()
        if line.startswith("rdma_out_of_sequence_total")
        and 'pod_name="trainer-0"' in line
    )
    assert 'pod_namespace="team-a"' in line and 'net_dev_name="net1"' in line
    assert line.endswith(" 5")
    assert (Path(proc.args[2])).is_socket()  # and it still serves the shims


@pytest.mark.parametrize("agent", [2], indirect=True)
def test_the_metrics_server_and_idle_spares_end_with_an_agent_killed_by_sigkill(
    agent: tuple[subprocess.Popen[str], int],
) -> None:
    proc, port = agent
    scrape(port)
    orphans = wait_children(proc.pid, 3)  # the sidecar and two spare workers
    proc.kill()
    proc.wait(timeout=10)
    wait_gone(orphans, "orphaned children")
    with socket.socket() as s:
        # the port is free for the next agent (which binds as this, with
        # SO_REUSEADDR: the scrape's connection may sit in TIME_WAIT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_dead_metrics_server_is_started_again_and_stops_with_the_agent(
    agent: tuple[subprocess.Popen[str], int],
) -> None:
    proc, port = agent
    scrape(port)
    (sidecar,) = children(proc.pid)
    os.kill(sidecar, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while not (children(proc.pid) - {sidecar}):
        assert time.monotonic() < deadline, "the metrics server was not started again"
        time.sleep(0.1)
    assert "rdma_out_of_sequence_total" in scrape(port)
    (restarted,) = children(proc.pid)

    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert f"sidecar {sidecar} ended (signal 9)" in err
    assert not Path(f"/proc/{restarted}").exists() or (
        "Z" in Path(f"/proc/{restarted}/stat").read_text().split()[2]
    )
    assert "Traceback" not in err


def test_the_reconciles_counts_are_on_the_agents_metrics(
    node: RdmaNode, agent: tuple[subprocess.Popen[str], int]
) -> None:
    from cni.agent.reconcile_metrics import STATS_FILE, ReconcileStats

    _, port = agent
    ReconcileStats(repairs={"netns-gone": 3}, last_pass_timestamp=1764835200.0).save(
        node.state_dir / STATS_FILE
    )
    text = scrape(port)
    assert 'railyard_reconcile_repairs_total{what="netns-gone"} 3.0' in text
    assert "railyard_reconcile_last_pass_timestamp_seconds 1.7648352e+09" in text
    assert "rdma_out_of_sequence_total" in text  # beside the exporter's series
