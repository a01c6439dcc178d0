# SPDX-License-Identifier: Apache-2.0
"""Kernel-tier fixtures for the cni.kernel adapters (names prefixed "rk").

``host`` puts the test thread into a fresh named netns for the test, so the
adapters' "plugin's own netns" is that namespace, never the machine's root netns
(subprocesses forked from the thread inherit it too, so ``ip`` reads it back).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from cni.kernel.netns import in_netns


def sh(*argv: str) -> str:
    """Run a command (``ip``...) and return stdout; fail loudly on error."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def ip_json(netns: str | None, *argv: str) -> list[dict]:
    """``ip -j [-n NAME] ...`` parsed; netns is a /var/run/netns path or None."""
    where = ["-n", os.path.basename(netns)] if netns else []
    out = sh("ip", "-j", *where, *argv)
    return json.loads(out) if out.strip() else []


def ip(netns: str | None, *argv: str) -> str:
    where = ["-n", os.path.basename(netns)] if netns else []
    return sh("ip", *where, *argv)


@dataclass
class Host:
    """The netns the test runs in (its path) and a factory of more namespaces."""

    path: str
    make: Callable[[], str]


@pytest.fixture
def host(make_netns: Callable[..., str]) -> Iterator[Host]:
    path = make_netns("rk")
    with in_netns(path):
        yield Host(path=path, make=lambda: make_netns("rk"))
