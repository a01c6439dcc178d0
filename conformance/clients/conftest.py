# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the real-client tests: the installed plugins, a simulated node,
private podman/containerd instances and the cnitool binary.

Everything a test creates is removed at teardown, also when the test fails:
containers (and with them the CNI DEL they trigger), daemons, netns ("rp"
prefix), the lab's links and netns, and the temporary directories. Teardown
runs in reverse order of setup, so a runtime is always torn down (its DELs
reaching ipamd) before the simulated host under it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .host import Installation, SimHost
from .runtimes import Containerd, Podman

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "packaging" / "clients"
# where cnitool.sh caches its build when ./dev did not provide $CNITOOL
CNITOOL_CACHE = Path("/var/tmp/railyard-clients/cnitool")


def _root_with_netns() -> bool:
    if os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-n", "true"], check=False).returncode == 0


@pytest.fixture(scope="session")
def needs_root() -> None:
    if not _root_with_netns():
        pytest.skip("real clients need root and network namespaces")


@pytest.fixture(scope="session")
def install(needs_root: None, installation: Any) -> Installation:
    """The installed plugins, from the conformance suite's ``installation``
    fixture (conformance/conftest.py); a missing one fails: a packaging
    mistake must."""
    inst = Installation(Path(installation.cni_bin), installation.tool("ipamd"))
    missing = inst.missing()
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed in {inst.cni_bin_dir}")
    return inst


@pytest.fixture(params=["warm", "direct"])
def make_host(
    request: pytest.FixtureRequest, install: Installation
) -> Iterator[Callable[..., SimHost]]:
    """Factory of simulated nodes (lab + ipamd); all torn down after the test.

    Every client test runs twice: through the warm path (the lab's CNI bin dir
    holds shims forwarding to the installed agent serving that lab) and in
    direct mode (the lab's launchers run each plugin in its own process).
    """
    made: list[SimHost] = []
    warm = request.param == "warm"

    def make(rails: int = 1, vfs_per_pf: int = 1, ib_rails: int = 0) -> SimHost:
        host = SimHost.up(
            install, rails=rails, vfs_per_pf=vfs_per_pf, ib_rails=ib_rails, warm=warm
        )
        made.append(host)
        return host

    try:
        yield make
    finally:
        for host in reversed(made):
            host.down()


@pytest.fixture
def rp_netns(needs_root: None) -> Iterator[Callable[[], str]]:
    """Factory of named netns ``rp<hex>``; yields /var/run/netns paths."""
    made: list[str] = []

    def make() -> str:
        name = f"rp{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        made.append(name)
        return f"/var/run/netns/{name}"

    try:
        yield make
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def tmp_short(needs_root: None) -> Iterator[Path]:
    """A short temporary directory (socket paths must fit in 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="rp-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def cnitool(needs_root: None) -> str:
    """cnitool built from Debian's source: ``$CNITOOL`` (``./dev`` builds it),
    else packaging/clients/cnitool.sh into ``$CNITOOL_DIR`` (cached)."""
    given = os.environ.get("CNITOOL", "")
    if given and os.access(given, os.X_OK):
        return given
    out = Path(os.environ.get("CNITOOL_DIR", CNITOOL_CACHE))
    proc = subprocess.run(
        ["bash", str(CLIENTS / "cnitool.sh"), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"building cnitool failed:\n{proc.stderr[-3000:]}")
    return str(out / "cnitool")


@pytest.fixture
def make_podman(tmp_short: Path) -> Iterator[Callable[..., Podman]]:
    """Factory of private podmans (config, storage, CNI dir under tmp)."""
    made: list[Podman] = []

    def make(cni_bin_dirs: list[Path], env: dict[str, str]) -> Podman:
        podman = Podman(tmp_short / f"podman{len(made)}")
        made.append(podman)
        podman.setup(cni_bin_dirs, env)
        return podman

    try:
        yield make
    finally:
        for podman in reversed(made):
            podman.teardown()


@pytest.fixture
def containerd(tmp_short: Path) -> Iterator[Containerd]:
    """A private containerd with the busybox image imported."""
    daemon = Containerd(tmp_short / "containerd")
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()
