# SPDX-License-Identifier: Apache-2.0
"""ipamd as a subprocess (``python -m ipamd serve``) on a temporary socket."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]

POOLS_YAML = """
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata:
  name: stress
spec:
  subnet: 10.77.0.0/16
  ips:
    - 10.77.0.1-10.77.31.254
  gateway: 10.77.255.254
"""


class DaemonProc:
    """One ``ipamd serve`` process; ``kill()`` is SIGKILL, ``stop()`` SIGTERM.

    ``db_url`` defaults to a SQLite file in ``workdir``; replicas on one
    database get distinct ``name``s (their own socket and log). A replica
    expected to start as a standby is started with ``ready=False``: it only
    waits until the daemon answers Status.
    """

    def __init__(
        self,
        workdir: Path,
        *extra: str,
        db_url: str | None = None,
        name: str = "ipamd",
        ready: bool = True,
    ) -> None:
        self.workdir = workdir
        self.name = name
        self.socket = workdir / ("run" if name == "ipamd" else name) / "ipamd.sock"
        self.db = workdir / "ipamd.db"
        self.db_url = db_url or f"sqlite:///{self.db}"
        self.log = workdir / f"{name}.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ipamd",
                    "serve",
                    "--db",
                    self.db_url,
                    "--listen",
                    str(self.socket),
                    *extra,
                ],
                cwd=REPO,
                stdout=log,
                stderr=log,
            )
        if ready:
            self.wait_ready()
        else:
            self.wait_serving()

    def status(self, timeout: float = 1.0) -> Any:
        """The daemon's StatusReply (role, lease holder, readiness)."""
        from cni.ipam.grpc_client import IpamdClient
        from ipamd.api.v1 import ipam_pb2 as pb
        from ipamd.api.v1.version import API_VERSION

        with IpamdClient(str(self.socket), timeout=timeout) as client:
            return client.stub.Status(
                pb.StatusRequest(client_version=API_VERSION), timeout=timeout
            )

    def wait_serving(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ipamd exited: {self.log.read_text()}")
            try:
                self.status()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def wait_ready(self, timeout: float = 20.0) -> None:
        from cni.ipam.grpc_client import IpamdClient

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ipamd exited: {self.log.read_text()}")
            try:
                with IpamdClient(str(self.socket), timeout=1) as client:
                    client.status()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ra-ipamd-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_daemon(workdir: Path) -> Iterator[Callable[..., DaemonProc]]:
    """Factory; every process started is stopped at teardown."""
    procs: list[DaemonProc] = []

    def start(*extra: str, **kw: Any) -> DaemonProc:
        procs.append(DaemonProc(workdir, *extra, **kw))
        return procs[-1]

    try:
        yield start
    finally:
        for p in procs:
            if p.proc.poll() is None:
                os.kill(p.proc.pid, signal.SIGCONT)  # a test may have paused it
                os.kill(p.proc.pid, signal.SIGKILL)
                p.proc.wait(10)


@pytest.fixture
def pools_yaml() -> str:
    return POOLS_YAML


# An ipamd in this process (``ipamd.server.build``) on a short temporary unix
# socket: the tests that talk to a running daemon without a subprocess.
from ipamd.server import Daemon, build  # noqa: E402
from ipamd.settings import Settings  # noqa: E402
from tests.unit.ipamd.conftest import rails_yaml, short_dir  # noqa: E402, F401


@pytest.fixture
def daemon(short_dir: Path) -> Iterator[Daemon]:  # noqa: F811 - the fixture
    settings = Settings(
        db_url=f"sqlite:///{short_dir / 'ipamd.db'}",
        listen=str(short_dir / "run" / "ipamd.sock"),
    )
    d = build(settings)
    try:
        yield d
    finally:
        d.stop(grace=None)


@pytest.fixture
def socket_path(daemon: Daemon) -> str:
    assert daemon.socket is not None
    return str(daemon.socket)
