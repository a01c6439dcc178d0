# SPDX-License-Identifier: Apache-2.0
"""Private podman and containerd instances, set up by packaging/clients/*.sh.

The shell scripts are what CI and a developer run; these classes only call them
and add the few reads the tests need. Network configs are written by the tests.

Imports: standard library and this package.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .commands import run

CLIENTS = Path(__file__).resolve().parents[2] / "packaging" / "clients"
IMAGE = "localhost/railyard-busybox:latest"


class Podman:
    """podman 4 with the CNI backend, all of its state in ``dir``."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.net_dir = workdir / "net.d"

    def setup(self, cni_bin_dirs: Sequence[Path], env: Mapping[str, str]) -> None:
        cmd = ["bash", str(CLIENTS / "podman.sh"), "setup", str(self.dir)]
        for d in cni_bin_dirs:
            cmd += ["--cni-bin-dir", str(d)]
        for key, value in env.items():
            cmd += ["--env", f"{key}={value}"]
        run(cmd, timeout=120)

    def teardown(self) -> None:
        run(
            ["bash", str(CLIENTS / "podman.sh"), "teardown", str(self.dir)],
            timeout=120,
            check=False,
        )

    @property
    def env(self) -> dict[str, str]:
        """The caller's env plus the private config (nothing else for plugins:
        their variables come from containers.conf ``[engine] env``)."""
        return {
            **os.environ,
            "CONTAINERS_CONF": str(self.dir / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(self.dir / "storage.conf"),
        }

    def add_network(self, conflist: dict[str, Any]) -> None:
        path = self.net_dir / f"{conflist['name']}.conflist"
        path.write_text(json.dumps(conflist, indent=1))

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return run(["podman", *args], env=self.env, check=check, timeout=timeout)

    def exists(self, name: str) -> bool:
        return self("container", "exists", name, check=False).returncode == 0


class Containerd:
    """A private containerd 1.6; ``ctr`` runs see only the given CNI dirs."""

    namespace = "railyard"

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.script = str(CLIENTS / "containerd.sh")

    def start(self) -> None:
        run(["bash", self.script, "start", str(self.dir)], timeout=60)

    def stop(self) -> None:
        run(["bash", self.script, "stop", str(self.dir)], timeout=60, check=False)

    def ctr_cni_cmd(self, conf_dir: Path, bin_dir: Path, *args: str) -> list[str]:
        """argv of ``ctr ARGS`` whose CNI reads ``conf_dir`` and ``bin_dir``."""
        return [
            "bash",
            self.script,
            "ctr",
            str(self.dir),
            "--cni-conf-dir",
            str(conf_dir),
            "--cni-bin-dir",
            str(bin_dir),
            "--",
            *args,
        ]

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Plain ``ctr`` against this daemon (no CNI involved)."""
        return run(
            [
                "ctr",
                "--address",
                str(self.dir / "containerd.sock"),
                "--namespace",
                self.namespace,
                *args,
            ],
            check=check,
        )

    def task(self, container: str) -> tuple[int, str] | None:
        """(pid, status) of the container's task, from ``ctr task ls``."""
        for line in self.ctr("task", "ls").stdout.splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 3 and fields[0] == container:
                return int(fields[1]), fields[2]
        return None
