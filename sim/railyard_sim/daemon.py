# SPDX-License-Identifier: Apache-2.0
"""The lab's ipamd: started in the background, fed the lab's pools, stopped by pid.

The daemon is driven only through its documented command line
(``ipamd serve --db URL --listen ADDR``, ``ipamd pool apply -f FILE``), so the lab
runs the same daemon a node runs. Its pid, socket, database and log live in the
lab directory.

Imports: standard library only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

SOCKET = "ipamd.sock"
DB = "ipam.db"
PID = "ipamd.pid"
LOG = "ipamd.log"
SOCKET_ENV = "RAILYARD_IPAMD_SOCKET"


class DaemonError(RuntimeError):
    """ipamd did not start, refused the pools, or would not stop."""


def ipamd_command() -> str:
    """This venv's ``ipamd`` script (the checkout's code), else the one on PATH."""
    local = Path(sys.executable).parent / "ipamd"
    if local.is_file():
        return str(local)
    found = shutil.which("ipamd")
    if found is None:
        raise DaemonError("no ipamd command in this venv or on PATH")
    return found


def socket_path(lab_dir: Path) -> Path:
    return Path(lab_dir) / SOCKET


def client_env(lab_dir: Path) -> dict[str, str]:
    """Environment that points ipamd's clients (CLI, plugins) at the lab's daemon."""
    return {SOCKET_ENV: str(socket_path(lab_dir))}


def start(
    lab_dir: Path,
    timeout: float = 20.0,
    metrics_listen: str = "",
    node_reconcile_grace: float | None = None,
) -> int:
    """Start ``ipamd serve`` for the lab; return once its socket accepts calls.

    ``metrics_listen`` (HOST:PORT) turns on ipamd's Prometheus endpoint;
    ``node_reconcile_grace`` (seconds) replaces ipamd's default grace before
    a node's account releases an allocation."""
    lab_dir = Path(lab_dir).absolute()
    sock = socket_path(lab_dir)
    sock.unlink(missing_ok=True)
    cmd = [
        ipamd_command(),
        "serve",
        "--db",
        f"sqlite:///{lab_dir / DB}",
        "--listen",
        f"unix://{sock}",
    ]
    if metrics_listen:
        cmd += ["--metrics-listen", metrics_listen]
    if node_reconcile_grace is not None:
        cmd += ["--node-reconcile-grace", str(node_reconcile_grace)]
    with open(lab_dir / LOG, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # survives the CLI, as a node daemon does
            env={**os.environ, **client_env(lab_dir)},
        )
    (lab_dir / PID).write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DaemonError(
                f"ipamd exited with {proc.returncode}: {_tail(lab_dir / LOG)}"
            )
        if sock.exists():
            return proc.pid
        time.sleep(0.05)
    stop(lab_dir)
    raise DaemonError(f"ipamd socket {sock} did not appear within {timeout:.0f}s")


def apply_pools(lab_dir: Path, pools_file: Path) -> str:
    """``ipamd pool apply -f <pools.yaml>`` against the lab's daemon; its output."""
    lab_dir = Path(lab_dir).absolute()
    proc = subprocess.run(
        [
            ipamd_command(),
            "pool",
            "apply",
            "-f",
            str(pools_file),
            "--socket",
            str(socket_path(lab_dir)),
        ],
        env={**os.environ, **client_env(lab_dir)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if proc.returncode != 0:
        raise DaemonError(f"ipamd pool apply: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def running_pid(lab_dir: Path) -> int | None:
    """The lab's ipamd pid if the recorded process is alive and really the lab's."""
    try:
        pid = int((Path(lab_dir) / PID).read_text())
    except (OSError, ValueError):
        return None
    # A recycled pid belongs to someone else: never signal it.
    return pid if _serves(pid, Path(lab_dir).absolute()) else None


def lab_pids(lab_dir: Path) -> list[int]:
    """Every live ipamd serving this lab: the recorded pid, and any other in /proc.

    The scan finds a daemon whose pid file was lost (a crash between start
    and the write, a half-removed lab directory); the socket file itself need
    not exist, only the daemon's command line naming it.
    """
    lab_dir = Path(lab_dir).absolute()
    found = {p for p in [running_pid(lab_dir)] if p is not None}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            if _serves(int(entry.name), lab_dir):
                found.add(int(entry.name))
    return sorted(found)


def _serves(pid: int, lab_dir: Path) -> bool:
    """Whether process ``pid`` is ``ipamd serve`` listening on the lab's socket."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    args = [a.decode(errors="replace") for a in cmdline]
    sock = str(socket_path(lab_dir))
    # Exact arguments: /x/lab/ipamd.sock must not match /y/x/lab/ipamd.sock.
    return "serve" in args and any(a in (sock, f"unix://{sock}") for a in args)


def stop(lab_dir: Path, timeout: float = 10.0) -> None:
    """SIGTERM (then SIGKILL) the lab's ipamd and remove its pid and socket files.

    Safe to call when nothing runs, twice, or on a half-removed lab.
    """
    lab_dir = Path(lab_dir).absolute()
    pids = lab_pids(lab_dir)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if alive(pid):
            _signal(pid, signal.SIGKILL)
    for pid in pids:
        _reap(pid, deadline=time.monotonic() + 2.0)
    (lab_dir / PID).unlink(missing_ok=True)
    socket_path(lab_dir).unlink(missing_ok=True)


def remove_files(lab_dir: Path) -> None:
    for name in (DB, f"{DB}-wal", f"{DB}-shm", LOG):
        (Path(lab_dir) / name).unlink(missing_ok=True)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # it exited meanwhile
        pass


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (not exited, not a zombie); reaps it if it is
    our child."""
    try:
        # Reap it if it is our child (the `demo` command starts and stops it).
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # A zombie has exited; only its parent's wait() is missing.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _reap(pid: int, deadline: float) -> None:
    """Wait (bounded) until the pid has left /proc, so callers see it gone.

    An exited daemon that is not our child stays a zombie until its new
    parent (init) reaps it, usually within milliseconds.
    """
    while time.monotonic() < deadline:
        alive(pid)  # reaps it if it is our child
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.02)


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
