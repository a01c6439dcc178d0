# SPDX-License-Identifier: Apache-2.0
"""Running client programs so that a failure shows what they printed.

Imports: standard library only.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence


def run(
    cmd: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    check: bool = True,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; with ``check`` a non-zero exit raises AssertionError + output."""
    proc = subprocess.run(
        list(cmd),
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        input=input,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    return proc
