# SPDX-License-Identifier: Apache-2.0
"""The lab's ``railyard-agent``: started like its ipamd, stopped by pid.

``python -m railyard_sim.agent --lab DIR --socket <lab>/agent/agent.sock`` is
the simulated host's agent entry: the production server
(``cni.agent.server.Agent``) with a plugin table whose commands get the lab's
``DepsFactory`` (``railyard_sim.host``), the way the lab's launchers
(``railyard_sim.launchers``) run a plugin. ``shim_bin_dir`` writes the
warm-path shims for a lab: the lab's agent socket baked in, and the lab's
launcher body as their direct mode.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from railyard_sim import daemon

if TYPE_CHECKING:
    from cni.agent.metrics import Channel
    from cni.agent.server import PluginTable

SOCKET_ENV = "RAILYARD_AGENT_SOCKET"
DIR = "agent"
#: Where ``pods`` puts the lab's shims (the launchers stay in ``cni-bin``).
SHIM_BIN_DIR = "warm-bin"
PID = "agent.pid"
LOG = "agent.log"
#: The lab agent's reconcile interval (seconds) unless told otherwise.
RECONCILE_INTERVAL = 30.0


class AgentError(RuntimeError):
    """The lab's agent did not start or would not stop."""


def socket_path(lab_dir: Path) -> Path:
    return Path(lab_dir).absolute() / DIR / "agent.sock"


def client_env(lab_dir: Path) -> dict[str, str]:
    """Environment that points the shims at the lab's agent."""
    return {SOCKET_ENV: str(socket_path(lab_dir))}


def shim_bin_dir(
    out_dir: Path | str,
    lab_dir: Path | str,
    socket: Path | str | None = None,
    python: str = "",
) -> Path:
    """Warm-path shims for the lab's plugins in ``out_dir``.

    Each forwards to ``socket`` (default: the lab agent's); with no agent there
    it runs the lab's launcher body in ``python`` (default: this interpreter),
    exactly as ``railyard_sim.launchers`` does. Written to a temporary name and
    renamed, so a runtime exec'ing a shim meanwhile sees old or new.
    """
    from cni.agent.shim import render
    from cni.plugins.registry import PLUGINS

    out = Path(out_dir)
    lab = Path(lab_dir).absolute()
    sock = str(socket or socket_path(lab))
    python = python or sys.executable
    out.mkdir(parents=True, exist_ok=True)
    for cni_type in PLUGINS:
        direct = (
            f"from railyard_sim.launchers import run; run({cni_type!r}, {str(lab)!r})"
        )
        tmp = out / f".{cni_type}.tmp"
        tmp.write_text(
            render(cni_type, "", "", python, sock, python, direct_code=direct)
        )
        tmp.chmod(0o755)
        os.replace(tmp, out / cni_type)
    return out


def sim_table(lab_dir: Path | str) -> PluginTable:
    """Every plugin, its commands given the lab's ``DepsFactory``."""
    from cni.agent.server import PluginEntry
    from cni.plugins.registry import PLUGINS
    from railyard_sim.host import deps_factory

    make_deps = deps_factory(lab_dir)
    return {
        cni_type: PluginEntry(
            functools.partial(p.funcs, make_deps),
            f"{p.about} (simulated host {lab_dir})",
            cni_type,
        )
        for cni_type, p in PLUGINS.items()
    }


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


def start(
    lab_dir: Path,
    timeout: float = 20.0,
    max_workers: int = 16,
    spares: int = 2,
    metrics_listen: str = "",
    reconcile_interval: float = RECONCILE_INTERVAL,
    state_dir: Path | None = None,
    cri_socket: Path | None = None,
    sandbox_min_age: float | None = None,
) -> int:
    """Start the lab's agent; return once its socket exists (it then accepts).

    ``metrics_listen`` (HOST:PORT): its /metrics, as ``railyard-agent
    --metrics-listen`` serves them (the lab's RDMA counters, attach latency).
    Its reconcile (``cni.agent.reconcile``) runs every ``reconcile_interval``
    seconds (0: off) over the records in ``state_dir`` (default the lab's,
    ``<lab>/state``). It asks no container runtime unless ``cri_socket`` names
    one (a test's): the lab has none, and a runtime on the machine (containerd
    for the conformance tier) knows none of the lab's pods."""
    lab_dir = Path(lab_dir).absolute()
    sock = socket_path(lab_dir)
    sock.parent.mkdir(mode=0o700, exist_ok=True)
    sock.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "railyard_sim.agent",
        "--lab",
        str(lab_dir),
        "--socket",
        str(sock),
        "--max-workers",
        str(max_workers),
        "--spare-workers",
        str(spares),
        "--reconcile-interval",
        str(reconcile_interval),
    ]
    if metrics_listen:
        cmd += ["--metrics-listen", metrics_listen]
    if state_dir is not None:
        cmd += ["--state-dir", str(state_dir)]
    if cri_socket is not None:
        cmd += ["--cri-socket", str(cri_socket)]
    if sandbox_min_age is not None:
        cmd += ["--sandbox-min-age", str(sandbox_min_age)]
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
        while time.monotonic() < deadline and daemon.alive(pid):
            time.sleep(0.02)
        if daemon.alive(pid):
            os.killpg(pid, signal.SIGKILL)
            while daemon.alive(pid):
                time.sleep(0.02)
    (lab_dir / DIR / PID).unlink(missing_ok=True)
    socket_path(lab_dir).unlink(missing_ok=True)


def remove_files(lab_dir: Path) -> None:
    """The agent's log, its directory and the lab's shims (``down``)."""
    shutil.rmtree(Path(lab_dir) / SHIM_BIN_DIR, ignore_errors=True)
    d = Path(lab_dir) / DIR
    (d / LOG).unlink(missing_ok=True)
    try:
        d.rmdir()
    except OSError:
        pass


def metrics_sidecar(lab_dir: Path, listen: str, attach: Channel) -> None:
    """The lab agent's /metrics: the lab's RDMA counters (what ``railyard-sim
    exporter`` serves) and the agent's attach latency."""
    from cni.agent import metrics
    from railyard_sim.counters import NODE_NAME, sim_collector
    from railyard_sim.lab import Lab

    lab = Lab.load(lab_dir)
    metrics.serve(listen, attach, NODE_NAME, before=[sim_collector(lab).render])


def lab_reconciler(
    lab: Path,
    table: PluginTable,
    args: argparse.Namespace,
) -> Callable[[], None] | None:
    """The agent's reconcile over the lab's records, its plugins reaching the
    lab's ipamd; None when ``--reconcile-interval`` is 0."""
    if not args.reconcile_interval:
        return None
    from cni.agent.reconcile import ReconcileSettings, reconciler_process
    from railyard_sim.host import STATE_DIR

    settings = ReconcileSettings(interval=args.reconcile_interval)
    if args.sandbox_min_age is not None:
        settings = replace(settings, sandbox_min_age=args.sandbox_min_age)
    return reconciler_process(
        table,
        args.state_dir or lab / STATE_DIR,
        settings,
        cri_socket=str(args.cri_socket or ""),
        env={**os.environ, **daemon.client_env(lab)},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="railyard_sim.agent")
    parser.add_argument("--lab", type=Path, required=True)
    parser.add_argument("--socket", type=Path)
    parser.add_argument("--max-workers", type=int, default=16)
    parser.add_argument("--spare-workers", type=int, default=2)
    parser.add_argument("--metrics-listen", default="", metavar="HOST:PORT")
    parser.add_argument("--reconcile-interval", type=float, default=RECONCILE_INTERVAL)
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--cri-socket", type=Path, default=None)
    parser.add_argument("--sandbox-min-age", type=float, default=None)
    parser.add_argument(
        "--reconcile-once",
        action="store_true",
        help="run one reconcile pass over the lab's records in this process, exit",
    )
    args = parser.parse_args(argv)
    if args.socket is None and not args.reconcile_once:
        parser.error("--socket is required")
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s railyard-agent (lab): %(message)s",
    )
    os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"
    from cni.agent.metrics import Channel
    from cni.agent.plugins import PRELOAD
    from cni.agent.server import Agent
    from cni.agent.warmup import ipamd_channels, keep_ipamd_channels

    lab = args.lab.absolute()
    attach = Channel() if args.metrics_listen else None
    table = sim_table(lab)
    if args.reconcile_once:
        from cni.agent.reconcile import Reconciler
        from railyard_sim.host import STATE_DIR

        report = Reconciler(
            table,
            args.state_dir or lab / STATE_DIR,
            {**os.environ, **daemon.client_env(lab)},
        ).run_pass()
        print(json.dumps({"repaired": report.repaired, "failed": report.failed}))
        return 0
    agent = Agent(
        table,
        socket_path=args.socket,
        max_workers=args.max_workers,
        preload=(
            *PRELOAD,
            "railyard_sim.host",
            "railyard_sim.kernel_seams",
            "railyard_sim.recording",
        ),
        spares=args.spare_workers,
        # The lab's plugins reach its ipamd through the environment.
        prepare=ipamd_channels(daemon.client_env(lab)),
        worker_setup=keep_ipamd_channels,
        sidecar=(
            functools.partial(metrics_sidecar, lab, args.metrics_listen, attach)
            if attach is not None
            else None
        ),
        metrics=attach,
        reconciler=lab_reconciler(lab, table, args),
    )
    agent.warm()
    agent.bind()
    agent.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
