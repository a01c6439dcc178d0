# SPDX-License-Identifier: Apache-2.0
"""Pools and a short temporary directory for the ipamd unit tests (the tests
that talk to a running daemon are in tests/integration/ipamd)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

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
