# SPDX-License-Identifier: Apache-2.0
"""The installed shim carries its code compiled for the interpreter that
rendered it, and its source for any other (``cni.agent.shim.render``).

Each case edits the rendered file so that only one of the two ways can work,
then runs it as the runtime does (exec'd, ``CNI_COMMAND=VERSION``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from cni.agent.shim import render


def rendered(tmp_path: Path, edit=lambda text: text) -> Path:
    text = render(
        "sriov",
        "cni.plugins.sriov.__main__",
        "main",
        sys.executable,
        "/nonexistent/agent.sock",
        interpreter=sys.executable,
    )
    path = tmp_path / "sriov"
    path.write_text(edit(text))
    path.chmod(0o755)
    return path


def test_the_launcher_starts_with_the_shebang_and_the_installers_marker(
    tmp_path: Path,
) -> None:
    first, second = rendered(tmp_path).read_text().splitlines()[:2]
    assert first == f"#!{sys.executable} -IS"
    assert second.startswith('# railyard-cni launcher for CNI type "sriov"')
