# SPDX-License-Identifier: Apache-2.0
"""Shared test tiers: markers, root/netns capability detection, netns factory.

Tier rules (see README "Tests"):
- unit: no root, no sockets, in-process;
- kernel: real netns/veth, needs root; every namespace and link a test makes is
  removed in a finalizer, also when the test fails;
- integration: plugin binaries or a real ipamd as subprocesses.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent


def _private_cache() -> Path | None:
    """This user's cache for test runs, one level below the sticky temp dir
    (nobody else can swap it out), made 0700 and checked to be ours: a
    planted .pyc there would be run."""
    path = Path(tempfile.gettempdir()) / f"railyard-test-cache-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        st = path.lstat()
    except OSError:
        return None
    ours = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
    return path if ours and not st.st_mode & 0o077 else None


def _cache_outside_an_unwritable_tree() -> None:
    """What a run computes once is kept even where the tree cannot be
    written: a checkout owned by another user (the unit tier runs as any
    user), or PYTHONDONTWRITEBYTECODE set. Without it every run recompiles
    the project and redoes pytest's assertion rewriting of every test module
    (1.4 s of a unit-tier run, in each worker), and Hypothesis rescans the
    project's modules for constants (1.1 s). A tree ./dev compiled is read
    as it is; otherwise both go to this user's private cache, never into
    the tree (whose first run then also compiles the standard library and
    the venv's packages there, ~5 s). A Hypothesis directory chosen by the
    user (HYPOTHESIS_STORAGE_DIRECTORY) or a bytecode prefix wins."""
    if os.environ.get("RAILYARD_REALKERNEL_INSIDE") == "1":
        # Inside the real-kernel VM (tests/realkernel) the host's / is read
        # only and its bytecode is what keeps an emulated CPU's start short;
        # a cache of our own would mean compiling everything again there.
        return
    in_tree = PROJECT / "tests" / "__pycache__"
    # ./dev compiles the tree when it bootstraps (bytecode and pytest's
    # rewritten test modules, this conftest's among them): read from there.
    compiled = (
        in_tree
        / f"conftest.{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"
    )
    move_bytecode = not (sys.pycache_prefix or compiled.exists()) and (
        sys.dont_write_bytecode
        or not os.access(in_tree if in_tree.exists() else in_tree.parent, os.W_OK)
    )
    # Hypothesis keeps its directory in the working directory.
    move_hypothesis = "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ and not (
        os.access(Path.cwd(), os.W_OK)
    )
    cache = _private_cache() if move_bytecode or move_hypothesis else None
    if cache is None:
        return
    if move_bytecode:
        sys.pycache_prefix = str(cache / "pycache")
        sys.dont_write_bytecode = False
    if move_hypothesis:
        os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(cache / "hypothesis")


_cache_outside_an_unwritable_tree()


def _kernel_capable() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run(["unshare", "-n", "true"], check=False).returncode == 0
    except OSError:
        return False


KERNEL_CAPABLE = _kernel_capable()


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    if KERNEL_CAPABLE:
        return
    skip = pytest.mark.skip(reason="needs root and network namespaces")
    for item in items:
        # Markers only: ``item.keywords`` also holds directory names, and
        # tests/unit/cni/kernel/ must not read as the kernel tier.
        if item.get_closest_marker("kernel") or item.get_closest_marker("integration"):
            item.add_marker(skip)


UNIT_TIER = Path(__file__).resolve().parent / "unit"
#: The machines this project is built and tested on have two cores.
UNIT_WORKERS = 2


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``pytest tests/unit`` (or anything below it) runs on two pytest-xdist
    workers: the tier is in-process, its tests are independent, and a third
    of its wall time is waiting (a daemon down, a deadline running out).
    ``-n N`` chooses another count, ``-n 0`` one process; the whole suite
    (kernel and integration tiers, timing-sensitive) always runs in one."""
    if (
        not config.pluginmanager.hasplugin("xdist")
        or "PYTEST_XDIST_WORKER" in os.environ
    ):
        return
    if config.getoption("numprocesses", None) is not None:
        return
    if config.getoption("collectonly") or config.getoption("usepdb"):
        return
    if _unit_tier_only(config):
        config.option.numprocesses = UNIT_WORKERS


def _unit_tier_only(config: pytest.Config) -> bool:
    paths = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    return bool(paths) and all(p.is_relative_to(UNIT_TIER) for p in paths)


#: Memory-backed and world-writable on Linux (Debian mounts it rw, exec).
MEMORY_TEMP_ROOT = Path("/dev/shm")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The unit tier's ``tmp_path`` lives in memory: its fake sysfs trees are
    some 9,000 files, directories and symlinks, and on a disk file system
    (this project's machines: ext4 under /tmp) each costs 0.1-2 ms of
    journaling, over 5 s of the tier's time. pytest reads its temp root
    from PYTEST_DEBUG_TEMPROOT; an explicit ``--basetemp`` or temp root
    wins. Set in the controller before any worker starts, workers get
    their base temp below it. The other tiers keep the default: their
    temp dirs hold runtimes' storage and executables."""
    if "PYTEST_XDIST_WORKER" in os.environ or config.option.basetemp:
        return
    if "PYTEST_DEBUG_TEMPROOT" in os.environ or not _unit_tier_only(config):
        return
    if MEMORY_TEMP_ROOT.is_dir() and os.access(MEMORY_TEMP_ROOT, os.W_OK | os.X_OK):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(MEMORY_TEMP_ROOT)


_exit_status: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


def pytest_unconfigure(config: pytest.Config) -> None:
    """A test that leaves a non-daemon thread running keeps the interpreter
    from exiting after the summary: the run would hang until something kills
    it, with its verdict already printed. Name such threads, show where they
    are, and leave with the session's own status."""
    stragglers = [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread()
        and not t.daemon
        and t.is_alive()
        # Idle executor workers end by themselves at interpreter exit.
        and not t.name.startswith("ThreadPoolExecutor-")
    ]
    if not stragglers:
        return
    frames = sys._current_frames()
    for t in stragglers:
        stack = (
            "".join(traceback.format_stack(frames[t.ident]))
            if t.ident in frames
            else ""
        )
        sys.stderr.write(f"\ntests left a non-daemon thread running: {t.name}\n{stack}")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status[-1] if _exit_status else 1)


def unique_name(prefix: str = "ry") -> str:
    """A short unique name usable for a netns or (<=15 chars) a netdev."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_netns() -> Iterator[Callable[[], str]]:
    """Factory of named network namespaces; yields their /var/run/netns path.

    Every namespace made is deleted at teardown, whatever the test did.
    """
    made: list[str] = []

    def make(prefix: str = "ryt") -> str:
        name = unique_name(prefix)
        subprocess.run(["ip", "netns", "add", name], check=True)
        made.append(name)
        return f"/var/run/netns/{name}"

    try:
        yield make
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """One PostgreSQL server for the session (see tests/postgres.py)."""
    from tests.postgres import PostgresServer, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = PostgresServer(durable=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: object) -> Iterator[str]:
    """A fresh, empty database on the session's server, dropped afterwards."""
    from tests.postgres import PostgresServer

    assert isinstance(postgres_server, PostgresServer)
    name = postgres_server.create_database()
    try:
        yield postgres_server.url(name)
    finally:
        postgres_server.drop_database(name)
