# SPDX-License-Identifier: Apache-2.0
"""cni.skel: env validation, version negotiation, output and error JSON: the tests
that run the skeleton as a process.

The rest of them, in-process, are in tests/unit/cni/core/test_skel.py (the unit tier).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.unit.cni.core.conftest import base_env, netconf

pytestmark = pytest.mark.integration


PLUGIN_SCRIPT = """
from cni.skel import PluginFuncs, main
main(PluginFuncs(lambda ca: None, lambda ca: None), "railyard test")
"""


def test_closed_stdin_reads_as_empty_config_in_a_real_process():
    proc = subprocess.run(
        ["sh", "-c", f'exec "{sys.executable}" -c "$0" <&-', PLUGIN_SCRIPT],
        env=base_env("ADD", PATH="/usr/bin:/bin"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["code"] == 6


def test_main_exits_with_the_command_status_in_a_real_process():
    ok = subprocess.run(
        [sys.executable, "-c", PLUGIN_SCRIPT],
        input=json.dumps(netconf("1.0.0")),
        env=base_env("DEL", PATH="/usr/bin:/bin"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (ok.returncode, ok.stdout) == (0, "")
    version = subprocess.run(
        [sys.executable, "-c", PLUGIN_SCRIPT, "--version"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert version.returncode == 0
    assert version.stdout.startswith("railyard test\n")


FREEZE_SCRIPT = """
import atexit, gc, sys
from cni.skel import PluginFuncs, main
atexit.register(lambda: sys.stderr.write(f"frozen={gc.get_freeze_count()}\\n"))
main(PluginFuncs(lambda ca: None, lambda ca: None), "railyard test")
"""


def test_main_freezes_the_heap_so_the_exit_skips_the_final_collection():
    proc = subprocess.run(
        [sys.executable, "-c", FREEZE_SCRIPT],
        input=json.dumps(netconf("1.0.0")),
        env=base_env("DEL", PATH="/usr/bin:/bin"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (proc.returncode, proc.stdout) == (0, "")
    frozen = int(proc.stderr.rsplit("frozen=", 1)[1].split()[0])
    assert frozen > 1000  # every object alive at exit, not a handful
