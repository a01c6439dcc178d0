# SPDX-License-Identifier: Apache-2.0
"""railyard talks to ipamd through its client and never reaches into the
plugins' internals (pyproject's import-linter contract ``railyard-boundary``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def test_railyard_imports_no_plugin_internals() -> None:
    tool = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert tool, "import-linter is a dev dependency (pip install -e '.[dev]')"
    proc = subprocess.run(
        [tool, "--contract", "railyard-boundary", "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 kept, 0 broken" in proc.stdout
