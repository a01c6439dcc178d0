# SPDX-License-Identifier: Apache-2.0
"""The lab's ``railyard-agent``: started like its ipamd, stopped by pid.

``python -m railyard_sim.agent --socket <lab>/agent/agent.sock`` is the
simulated host's agent entry: it builds the plugin table the lab's plugins use
(``sim_table``) and hands it to ``cni.agent.server.Agent``, the production
server; the production ``railyard-agent`` builds its own. Plugins reach it
through shims (``railyard_sim.runtime.shim_bin_dir``) and ``client_env``.

``start``/``stop``/``client_env`` import the standard library only.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SOCKET_ENV = "RAILYARD_AGENT_SOCKET"
DIR = "agent"
PID = "agent.pid"
LOG = "agent.log"


class AgentError(RuntimeError):
    """The lab's agent did not start or would not stop."""


def socket_path(lab_dir: Path) -> Path:
    return Path(lab_dir).absolute() / DIR / "agent.sock"


def client_env(lab_dir: Path) -> dict[str, str]:
    """Environment that points the shims at the lab's agent."""
    return {SOCKET_ENV: str(socket_path(lab_dir))}


def running_pid(lab_dir: Path) -> int | None:
    try:
        pid = int((Path(lab_dir) / DIR / PID).read_text())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    # A recycled pid belongs to someone else: never signal it.
    return pid if os.fsencode(socket_path(lab_dir)) in cmdline else None


def start(lab_dir: Path, timeout: float = 20.0, max_workers: int = 16) -> int:
    """Start the lab's agent; return once its socket exists (it then accepts)."""
    lab_dir = Path(lab_dir).absolute()
    sock = socket_path(lab_dir)
    sock.parent.mkdir(mode=0o700, exist_ok=True)
    sock.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "railyard_sim.agent",
        "--socket",
        str(sock),
        "--max-workers",
        str(max_workers),
    ]
    with open(sock.parent / LOG, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            # Its own group: ``stop`` (and a SIGKILL test) reaches its workers too.
            start_new_session=True,
        )
    (sock.parent / PID).write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AgentError(f"railyard-agent exited with {proc.returncode}")
        if sock.exists():
            return proc.pid
        time.sleep(0.02)
    stop(lab_dir)
    raise AgentError(f"agent socket {sock} did not appear within {timeout:.0f}s")


def stop(lab_dir: Path, timeout: float = 30.0, sig: int = signal.SIGTERM) -> None:
    """Signal the agent's process group (its workers finish first on SIGTERM)."""
    lab_dir = Path(lab_dir).absolute()
    pid = running_pid(lab_dir)
    if pid is not None:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.02)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.02)
    (lab_dir / DIR / PID).unlink(missing_ok=True)
    socket_path(lab_dir).unlink(missing_ok=True)


def remove_files(lab_dir: Path) -> None:
    d = Path(lab_dir) / DIR
    (d / LOG).unlink(missing_ok=True)
    try:
        d.rmdir()
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="railyard_sim.agent")
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--max-workers", type=int, default=16)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s railyard-agent (lab): %(message)s",
    )
    os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"
    from cni.agent.plugins import PRELOAD, production_table
    from cni.agent.server import Agent

    # The lab's plugins select the simulated host from the request's own
    # environment (RAILYARD_SIM_ROOT), so the production table serves them;
    # the recording seam is imported up front like every other dependency.
    agent = Agent(
        production_table(),
        socket_path=args.socket,
        max_workers=args.max_workers,
        preload=(*PRELOAD, "railyard_sim.recording"),
    )
    agent.warm()
    agent.bind()
    agent.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
