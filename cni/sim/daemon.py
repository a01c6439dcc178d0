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


def start(lab_dir: Path, timeout: float = 20.0) -> int:
    """Start ``ipamd serve`` for the lab; return once its socket accepts calls."""
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
    """The lab's ipamd pid if that process is alive and really the lab's ipamd."""
    try:
        pid = int((Path(lab_dir) / PID).read_text())
    except (FileNotFoundError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    # A recycled pid belongs to someone else: never signal it.
    args = [a.decode(errors="replace") for a in cmdline]
    if "serve" in args and any(str(socket_path(lab_dir)) in a for a in args):
        return pid
    return None


def stop(lab_dir: Path, timeout: float = 10.0) -> None:
    """SIGTERM (then SIGKILL) the lab's ipamd and remove its pid and socket files."""
    lab_dir = Path(lab_dir)
    pid = running_pid(lab_dir)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    (lab_dir / PID).unlink(missing_ok=True)
    socket_path(lab_dir).unlink(missing_ok=True)


def remove_files(lab_dir: Path) -> None:
    for name in (DB, f"{DB}-wal", f"{DB}-shm", LOG):
        (Path(lab_dir) / name).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        # Reap it if it is our child (the `demo` command starts and stops it).
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
