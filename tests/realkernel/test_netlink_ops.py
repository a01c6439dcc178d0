# SPDX-License-Identifier: Apache-2.0
"""The plugins' rtnetlink operations on Debian's 6.1 kernel.

The kernel tier (tests/kernel) drives the production adapters' link, address,
route, rule and netns operations (cni.kernel.links, cni.kernel.netns)
against whatever kernel the CI host runs; here the same tests run inside the
VM, against the kernel a Debian 12 node runs, their output reported on failure.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.realkernel.conftest import NODEIDS_ENV, REPORT_ENV, ROOT

pytestmark = pytest.mark.realkernel


#: The adapters' links, addresses, routes, rules (links) and namespaces (netns).
TIER_FILES = ("tests/kernel/test_kernel_links.py", "tests/kernel/test_kernel_netns.py")


def test_the_kernel_tier_passes_on_debians_kernel() -> None:
    # One pytest run for both files: an interpreter start costs seconds under TCG.
    env = {k: v for k, v in os.environ.items() if k not in (REPORT_ENV, NODEIDS_ENV)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *TIER_FILES],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    summary = proc.stdout.strip().splitlines()[-1:]
    assert proc.returncode == 0, f"on {os.uname().release}:\n{proc.stdout[-8000:]}"
    assert summary and " passed" in summary[0] and "skipped" not in summary[0], summary
