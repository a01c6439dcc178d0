# SPDX-License-Identifier: Apache-2.0
"""What a replica tells probes and operators: /readyz, /livez and Status."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cni.ipam.grpc_client import IpamdClient
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION
from ipamd.server import Daemon, build
from ipamd.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
def pair(short_dir: Path) -> Iterator[tuple[Daemon, Daemon]]:
    made: list[Daemon] = []
    try:
        for name in ("a", "b"):
            made.append(
                build(
                    Settings(
                        db_url=f"sqlite:///{short_dir / 'ipamd.db'}",
                        listen=str(short_dir / name / "ipamd.sock"),
                        health_listen="127.0.0.1:0",
                        holder=f"replica-{name}",
                    )
                )
            )
        yield made[0], made[1]
    finally:
        for d in made:
            d.stop(grace=None)


def probe(daemon: Daemon, path: str) -> tuple[int, str]:
    assert daemon.health is not None
    url = f"http://{daemon.health.address}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode().strip()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode().strip()


def status(daemon: Daemon) -> pb.StatusReply:
    with IpamdClient(daemon.address, timeout=5) as client:
        return client.stub.Status(pb.StatusRequest(client_version=API_VERSION))


def test_only_the_active_replica_is_ready(pair) -> None:
    active, standby = pair
    assert probe(active, "/readyz") == (200, "active")
    code, body = probe(standby, "/readyz")
    assert code == 503
    assert "standby replica; the active one is replica-a" in body
    assert probe(standby, "/livez") == (200, "alive")


def test_status_names_role_lease_holder_and_database(pair, short_dir) -> None:
    active, standby = pair
    a, b = status(active), status(standby)
    assert (a.ready, a.role, a.lease_holder) == (True, "active", "replica-a")
    assert (b.ready, b.role, b.lease_holder) == (False, "standby", "replica-a")
    assert a.database == f"sqlite:///{short_dir / 'ipamd.db'}"


def test_the_standby_becomes_ready_when_the_active_stops(pair) -> None:
    active, standby = pair
    active.stop(grace=None)
    assert standby.engine.wait_active(2)
    assert probe(standby, "/readyz") == (200, "active")
    assert status(standby).lease_holder == "replica-b"
