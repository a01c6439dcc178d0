# SPDX-License-Identifier: Apache-2.0
"""Attach latency on the lab agent's /metrics (``railyard-sim up
--agent-metrics``), and the runtime's trace id in the plugin's log lines.

A VF is attached and detached through the warm shims by a libcni-like runtime
that passes ``TRACEPARENT`` as libcni does: the agent's /metrics then counts
one ADD and one DEL of ``sriov`` that succeeded, with the steps they went
through (PF settings, move, addresses, routes, detection, IPAM, record
writes), and every line the plugin logged for them names the trace.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from railyard_sim import agent, daemon
from railyard_sim.lab import Lab
from railyard_sim.runtime import DEBIAN_BIN, Attachment, Runtime
from tests.doubles.http_probe import free_port
from tests.doubles.http_probe import get_text as scrape

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the simulated host needs root"),
]

SIM = [sys.executable, "-m", "railyard_sim.cli"]
TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE}-b7ad6b7169203331-01"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[Lab, int]]:
    port = free_port()
    lab_dir = tmp_path / "lab"
    up = subprocess.run(
        [*SIM, "up", "--lab", str(lab_dir), "--rails", "1",
         "--agent-metrics", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        assert f"/metrics on 127.0.0.1:{port}" in up.stderr
        yield Lab.load(lab_dir), port
    finally:
        subprocess.run(
            [*SIM, "down", "--lab", str(lab_dir)], capture_output=True, timeout=120
        )


def histogram_count(text: str, name: str, **labels: str) -> float:
    """``name``'s ``_count`` for exactly ``labels`` (0 when not there)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}_count\{{(.*)\}} (\S+)", line)
        if match and ",".join(sorted(match.group(1).split(","))) == want:
            return float(match.group(2))
    return 0.0


def wait_count(port: int, name: str, at_least: float, **labels: str) -> str:
    """The scrape once ``name{labels}`` counted ``at_least`` (the worker sends
    its sample after the shim has its answer: it may arrive a little later)."""
    deadline = time.monotonic() + 10
    while True:
        text = scrape(port)
        if histogram_count(text, name, **labels) >= at_least:
            return text
        assert time.monotonic() < deadline, f"no {name}{labels} in:\n{text}"
        time.sleep(0.1)


def test_a_traced_attach_shows_in_the_histograms_and_the_plugin_log(
    lab: tuple[Lab, int], tmp_path: Path
) -> None:
    built, port = lab
    rail = built.rail(1)
    log_file = tmp_path / "sriov.log"
    conf = {
        "cniVersion": "1.0.0",
        "name": "rail1",
        "plugins": [
            {
                "type": "sriov",
                "deviceID": rail.vfs[0].pci,
                "logLevel": "debug",
                "logFile": str(log_file),
                "ipam": {"type": "spiderpool", "default_ipv4_ippool": [rail.pool_v4]},
            }
        ],
    }
    runtime = Runtime(
        [agent.shim_bin_dir(tmp_path / "warm", built.dir), DEBIAN_BIN],
        env={
            **daemon.client_env(built.dir),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TRACEPARENT": TRACEPARENT,
        },
        cache_dir=tmp_path / "cache",
    )
    netns = built.netns_name("traced")
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        att = Attachment("traced0123", f"/var/run/netns/{netns}", "net1")
        runtime.add(conf, att)
        runtime.delete(conf, att)
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)

    command = "railyard_cni_command_duration_seconds"
    ok = {"node_name": "railyard-sim", "plugin": "sriov", "result": "success"}
    text = wait_count(port, command, 1, command="DEL", **ok)
    assert histogram_count(text, command, command="ADD", **ok) == 1
    add = (
        'command="ADD",le="{}",node_name="railyard-sim",plugin="sriov",result="success"'
    )
    assert f"{command}_bucket{{{add.format('0.001')}}}" in text
    assert f"{command}_bucket{{{add.format('30.0')}}} 1.0" in text
    step = "railyard_cni_step_duration_seconds"
    node = {"node_name": "railyard-sim", "plugin": "sriov"}
    add_steps = ("pf_settings", "move", "addresses", "routes", "detection", "ipam")
    for name in add_steps:
        assert histogram_count(text, step, command="ADD", step=name, **node) == 1, name
    # Saved before the first change, then with the addresses and routes.
    assert histogram_count(text, step, command="ADD", step="record_write", **node) == 2
    for name in ("pf_settings", "move", "routes", "ipam", "record_write"):
        assert histogram_count(text, step, command="DEL", step=name, **node) >= 1, name
    # The lab's RDMA counters share the endpoint, as in production.
    assert "# HELP rdma_" in text

    lines = log_file.read_text().splitlines()
    assert lines, "the plugin logged nothing"
    assert all(f"trace={TRACE}" in line for line in lines), "\n".join(
        line for line in lines if f"trace={TRACE}" not in line
    )
    assert any(" ADD " in line for line in lines) and any(
        " DEL " in line for line in lines
    )
