# SPDX-License-Identifier: Apache-2.0
"""An in-process ipamd on a temporary unix socket with a SQLite file."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipamd.server import Daemon, build
from ipamd.settings import Settings

RAILS_YAML = """
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata:
  name: gpu1-net11
spec:
  subnet: 172.16.11.0/24
  ips:
    - 172.16.11.1-172.16.11.200
  gateway: 172.16.11.254
  routes:
    - dst: 10.10.0.0/16
      gw: 172.16.11.254
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata:
  name: gpu1-v6
spec:
  subnet: fd00:11::/64
  ips:
    - fd00:11::1-fd00:11::ffff:ffff:ffff:ffff
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata:
  name: tiny
spec:
  subnet: 172.16.12.0/24
  ips:
    - 172.16.12.1-172.16.12.2
"""


@pytest.fixture
def rails_yaml() -> str:
    """Two rail pools (IPv4 /24 and IPv6 /64) and a two-address pool."""
    return RAILS_YAML


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes; pytest's tmp_path can exceed it.
    path = Path(tempfile.mkdtemp(prefix="ra-ipamd-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(short_dir: Path) -> Iterator[Daemon]:
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
