# SPDX-License-Identifier: Apache-2.0
"""Every PromQL expression of the Grafana dashboards parses and queries only: the
tests that run the dashboard generator.

The rest of them, in-process, are in tests/unit/exporter/test_dashboards.py (the unit
tier).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.unit.exporter.test_dashboards import GRAFANA

pytestmark = pytest.mark.integration


def test_dashboards_are_what_the_generator_writes() -> None:
    proc = subprocess.run(
        [sys.executable, str(GRAFANA / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
