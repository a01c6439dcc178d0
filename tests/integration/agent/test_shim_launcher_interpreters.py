# SPDX-License-Identifier: Apache-2.0
"""The installed shim carries its code compiled for the interpreter that: the tests
that run the shim in other interpreters.

The rest of them, in-process, are in tests/unit/cni/agent/test_shim_launcher.py (the
unit tier).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cni.version import ALL, CURRENT
from tests.unit.cni.agent.test_shim_launcher import rendered

pytestmark = pytest.mark.integration


SOURCE_LINE = "exec(compile("


def version(binary: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-S", *flags, str(binary)],
        env={"CNI_COMMAND": "VERSION"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )


def without_source(text: str) -> str:
    lines = text.splitlines(keepends=True)
    assert lines[-1].startswith(SOURCE_LINE)
    return "".join(lines[:-1]) + "raise SystemExit(97)\n"


def for_another_interpreter(text: str) -> str:
    magic = repr(importlib.util.MAGIC_NUMBER)
    assert text.count(magic) == 1
    return text.replace(magic, repr(b"\x00\x00\r\n"))


def test_the_rendering_interpreter_runs_the_compiled_code(tmp_path: Path) -> None:
    done = version(rendered(tmp_path, without_source), "-X", "importtime")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "cniVersion": CURRENT,
        "supportedVersions": list(ALL),
    }
    # "from __future__ import annotations" is a compiler flag there, not an
    # import of the module at every start.
    assert "__future__" not in done.stderr


def test_another_interpreter_runs_the_source_with_the_same_answer(
    tmp_path: Path,
) -> None:
    compiled = version(rendered(tmp_path))
    source = version(rendered(tmp_path, for_another_interpreter))
    assert source.returncode == compiled.returncode == 0, source.stderr
    assert source.stdout == compiled.stdout
