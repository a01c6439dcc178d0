# SPDX-License-Identifier: Apache-2.0
"""A process's children and their end, read from /proc (the agent tests)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path


def children(pid: int) -> set[int]:
    """The pids ``pid`` forked that are still its children."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(c) for c in (task / "children").read_text().split())
    return found


def wait_gone(pids: Iterable[int], what: str, timeout: float = 10.0) -> None:
    """Fail the test unless every one of ``pids`` has ended within ``timeout``."""
    deadline = time.monotonic() + timeout
    while alive := [p for p in pids if Path(f"/proc/{p}").exists()]:
        assert time.monotonic() < deadline, f"{what} live on: {alive}"
        time.sleep(0.02)
