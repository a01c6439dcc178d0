# SPDX-License-Identifier: Apache-2.0
"""A simulated host whose ipamd serves the lab's pools, and what a runtime on
it needs to reach the lab's agent through the warm-path shims."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from railyard_sim import agent, daemon
from railyard_sim.lab import Lab
from railyard_sim.runtime import DEBIAN_BIN, Runtime


@contextmanager
def lab_with_ipamd(
    root: Path, node_reconcile_grace: float | None = None, **spec: Any
) -> Iterator[Lab]:
    """``Lab.up(root / "lab", **spec)`` with its ipamd started and its pools
    applied; ipamd is stopped and the lab removed when the block ends."""
    with Lab.up(root / "lab", **spec) as lab:
        daemon.start(lab.dir, node_reconcile_grace=node_reconcile_grace)
        try:
            daemon.apply_pools(lab.dir, lab.pools_file)
            yield lab
        finally:
            daemon.stop(lab.dir)


@contextmanager
def lab_with_agent(root: Path, **spec: Any) -> Iterator[Lab]:
    """``lab_with_ipamd`` with the lab's agent started (one spare worker), so a
    runtime execs the plugins through the shims (``warm_runtime``)."""
    with lab_with_ipamd(root, **spec) as lab:
        agent.start(lab.dir, spares=1)
        try:
            yield lab
        finally:
            agent.stop(lab.dir)


def allocations(lab: Lab) -> list[Any]:
    """What the lab's ipamd holds (``ipamd alloc list --json``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ipamd", "alloc", "list", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", **daemon.client_env(lab.dir)},
    )
    held: list[Any] = json.loads(proc.stdout)
    return held


def sriov_conf(lab: Lab, window_ms: int | None = None) -> dict[str, Any]:
    """A conflist attaching rail 1's first VF, addressed from its v4 pool by
    ipamd; ``window_ms``: the detection window (default: the plugin's)."""
    r = lab.rail(1)
    plugin: dict[str, Any] = {
        "type": "sriov",
        "deviceID": r.vfs[0].pci,
        "ipam": {"type": "spiderpool", "default_ipv4_ippool": [r.pool_v4]},
    }
    if window_ms is not None:
        plugin["detectionWindowMs"] = window_ms
    return {"cniVersion": "1.0.0", "name": "gpu1-sriov", "plugins": [plugin]}


def warm_runtime(lab: Lab, tmp_path: Path) -> Runtime:
    """A libcni-like runtime whose plugins are the lab agent's shims (state
    and caches under ``tmp_path``), then Debian's Go plugins."""
    env = {
        **daemon.client_env(lab.dir),
        "RAILYARD_STATE_DIR": str(tmp_path / "state"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    bins = agent.shim_bin_dir(tmp_path / "bin", lab.dir)
    return Runtime([bins, DEBIAN_BIN], env=env, cache_dir=tmp_path / "c")
