# SPDX-License-Identifier: Apache-2.0
"""``ipamd serve`` as a process: socket permissions, logs, clean shutdown."""

from __future__ import annotations

import stat
import subprocess
import sys

import pytest

from cni.ipam import IpamRequest
from cni.ipam.grpc_client import IpamdClient
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION

pytestmark = pytest.mark.integration


def test_serve_logs_each_allocation_and_release(start_daemon, pools_yaml) -> None:
    d = start_daemon()
    assert stat.S_IMODE(d.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(d.socket.parent.stat().st_mode) == 0o700
    with IpamdClient(str(d.socket)) as c:
        c.stub.ApplyPools(
            pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=pools_yaml)
        )
        c.allocate(
            IpamRequest(
                network="n", container_id="abc", ifname="net3", ipv4_pools=("stress",)
            )
        )
        c.release("n", "abc", "net3")
    assert d.stop() == 0
    log = d.log.read_text()
    assert "allocated pool=stress ip=10.77.0.1 container=abc ifname=net3" in log
    assert "released pool=stress ip=10.77.0.1 container=abc ifname=net3" in log
    assert not d.socket.exists()


def test_serve_restarts_over_a_stale_socket_after_sigkill(start_daemon) -> None:
    d = start_daemon()
    d.kill()
    assert d.socket.exists()
    again = start_daemon()
    with IpamdClient(str(again.socket)) as c:
        c.status()


def test_serve_on_plain_tcp_exits_with_a_reason() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ipamd",
            "serve",
            "--db",
            "memory",
            "--listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 1
    assert "needs --tls-cert and --tls-key" in proc.stderr
