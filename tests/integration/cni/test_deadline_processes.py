# SPDX-License-Identifier: Apache-2.0
"""cni.deadline: a hung command ends with a TIMEOUT error JSON, never a hang: the
tests that run plugins as processes.

The rest of them, in-process, are in tests/unit/cni/core/test_deadline.py (the unit
tier).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from tests.unit.cni.core.conftest import base_env, netconf

pytestmark = pytest.mark.integration


# The watchdog stage calls os._exit, so it is exercised in a subprocess.
STUCK_PLUGIN = textwrap.dedent(
    """
    import signal, sys, time
    from cni.skel import PluginFuncs, run_plugin

    def add(ca):
        # Stuck where SIGALRM cannot reach: blocked, as in an uninterruptible
        # kernel call or a rollback that hangs.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        print("partial", end="", file=sys.stderr, flush=True)
        time.sleep(30)

    sys.exit(run_plugin(PluginFuncs(add, lambda ca: None), "stuck",
                        deadline_seconds=0.3))
    """
)


def test_watchdog_kills_a_stuck_plugin_after_the_grace_period():
    env = base_env("ADD", RAILYARD_DEADLINE_GRACE="0.3")
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", STUCK_PLUGIN],
        input=json.dumps(netconf("0.4.0")),
        env=env | {"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert time.monotonic() - start < 10
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)  # exactly one complete document
    assert doc["code"] == 105
    assert doc["cniVersion"] == "0.4.0"
    assert "killed" in doc["details"]


def test_subprocess_plugin_sleeping_past_its_deadline_reports_timeout():
    script = textwrap.dedent(
        """
        import sys, time
        from cni.skel import PluginFuncs, run_plugin
        sys.exit(run_plugin(PluginFuncs(lambda ca: time.sleep(30), lambda ca: None),
                            "sleepy"))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(netconf("1.1.0")),
        env=base_env("ADD", RAILYARD_DEADLINE="0.3", PATH="/usr/bin:/bin"),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["code"] == 105
    assert "exceeded its 0.3s deadline" in proc.stderr
