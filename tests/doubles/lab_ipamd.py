# SPDX-License-Identifier: Apache-2.0
"""A simulated host whose ipamd serves the lab's pools, torn down after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from railyard_sim import daemon
from railyard_sim.lab import Lab


@contextmanager
def lab_with_ipamd(root: Path, **spec: Any) -> Iterator[Lab]:
    """``Lab.up(root / "lab", **spec)`` with its ipamd started and its pools
    applied; ipamd is stopped and the lab removed when the block ends."""
    with Lab.up(root / "lab", **spec) as lab:
        daemon.start(lab.dir)
        try:
            daemon.apply_pools(lab.dir, lab.pools_file)
            yield lab
        finally:
            daemon.stop(lab.dir)
