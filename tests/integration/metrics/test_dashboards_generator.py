# SPDX-License-Identifier: Apache-2.0
"""Every PromQL expression of the Grafana dashboards parses and queries only
metrics (and labels) our exporters serve.

The expressions are parsed by promql-parser (Python bindings of GreptimeDB's
Rust PromQL parser), not by a regular expression: function names, label
matchers and grouping clauses cannot be mistaken for metric names. The served
names come from running the exporters' own code, not from a list.
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
