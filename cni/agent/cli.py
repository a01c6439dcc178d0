# SPDX-License-Identifier: Apache-2.0
"""``railyard-agent``: run the node agent (see ``cni.agent.server``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cni.agent.metrics import Channel
    from cni.agent.server import PluginTable

SOCKET_ENV = "RAILYARD_AGENT_SOCKET"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="railyard-agent",
        description="Node agent: runs the sriov, ib-sriov, rdma and railyard-ipam "
        "commands the CNI shims forward to it.",
    )
    parser.add_argument(
        "--socket",
        type=Path,
        default=Path(
            os.environ.get(SOCKET_ENV, "") or "/run/railyard/agent/agent.sock"
        ),
        help="unix socket to listen on (its directory is made 0700; "
        f"default ${SOCKET_ENV} or /run/railyard/agent/agent.sock)",
    )
    parser.add_argument(
        "--max-workers",
        type=int,
        default=16,
        help="requests run at the same time; more wait in the backlog (default 16)",
    )
    parser.add_argument(
        "--spare-workers",
        type=int,
        default=2,
        help="idle workers kept ahead, each with its ipamd channel open, so a "
        "request starts without a fork or a connection (default 2; 0: a burst's "
        "first requests fork theirs)",
    )
    parser.add_argument(
        "--requests-per-worker",
        type=int,
        default=200,
        help="requests a worker serves, one at a time, before a fresh one takes "
        "its place (sooner when a request fails or leaves descriptors, threads or "
        "a netns behind; default 200; 1: a fresh process per request)",
    )
    parser.add_argument(
        "--ipamd",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help="ipamd endpoint the spare workers connect to ahead (repeat for "
        "replicas; default what a plugin config without ipam.socket uses: "
        "$RAILYARD_IPAMD_SOCKET or /run/railyard/ipamd.sock)",
    )
    parser.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        default="",
        help="serve /metrics here: the RDMA exporter's (as railyard-exporter) and "
        "the agent's attach latency per command and step (off by default)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(
            os.environ.get("RAILYARD_STATE_DIR", "") or "/var/lib/cni/railyard"
        ),
        help="the plugins' attachment records the metrics and the reconcile "
        "come from (default $RAILYARD_STATE_DIR or /var/lib/cni/railyard)",
    )
    parser.add_argument(
        "--reconcile-interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="finish attachments whose pod is gone without a DEL at start-up and "
        "then every SECONDS (+-20%%); 0 turns the reconcile off (default 60)",
    )
    parser.add_argument(
        "--reconcile-max-repairs",
        type=int,
        default=16,
        metavar="N",
        help="attachments one reconcile pass finishes at most (default 16)",
    )
    parser.add_argument(
        "--cri-socket",
        default="auto",
        metavar="PATH",
        help="the container runtime's CRI socket, asked which pod sandboxes it "
        "knows; 'auto' (default): containerd's, else CRI-O's, if present; '' off",
    )
    parser.add_argument(
        "--sysfs-root", type=Path, default=Path("/sys"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    return parser.parse_args(argv)


def metrics_sidecar(
    listen: str, state_dir: Path, sysfs_root: Path, attach: Channel
) -> Callable[[], None]:
    """``/metrics`` on ``listen``: the exporter's RDMA counters, as
    ``railyard-exporter --listen LISTEN`` serves them (owner labels through the
    pod's service account when there is one), then the agent's own: the
    reconcile's families (``cni.agent.reconcile_metrics``) and attach latency
    (``cni.agent.metrics``, from what the workers send on ``attach``)."""

    def serve() -> None:
        from cni.agent import metrics, reconcile_metrics
        from cni.exporter.cli import owner_labels_from
        from cni.exporter.collector import node_name
        from cni.exporter.server import build_collector

        owners = owner_labels_from(None, True)
        node = node_name()
        collector = build_collector(state_dir, node, sysfs_root, owners=owners)
        registry = reconcile_metrics.registry(state_dir)
        metrics.serve(
            listen,
            attach,
            node,
            before=[collector.render, lambda: reconcile_metrics.render(registry)],
        )

    return serve


def reconciler(
    args: argparse.Namespace, table: PluginTable
) -> Callable[[], None] | None:
    """The reconcile child (``cni.agent.reconcile``), None when turned off."""
    if not args.reconcile_interval:
        return None
    from cni.agent.reconcile import ReconcileSettings, reconciler_process

    settings = ReconcileSettings(
        interval=args.reconcile_interval,
        max_repairs=args.reconcile_max_repairs,
        ipamd_endpoints=tuple(args.ipamd),
    )
    return reconciler_process(table, args.state_dir, settings, args.cri_socket)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s railyard-agent: %(message)s",
        stream=sys.stderr,
    )
    if args.max_workers < 1:
        logging.error("--max-workers must be at least 1")
        return 2
    if args.spare_workers < 0:
        logging.error("--spare-workers must be at least 0")
        return 2
    if args.requests_per_worker < 1:
        logging.error("--requests-per-worker must be at least 1")
        return 2
    if args.reconcile_interval < 0 or args.reconcile_max_repairs < 1:
        logging.error(
            "--reconcile-interval must be 0 (off) or more, --reconcile-max-repairs "
            "at least 1"
        )
        return 2
    # The parent never opens a channel; each forked worker makes its own, so
    # gRPC's fork handlers (costly, and only needed for shared channels) stay off.
    os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"
    from cni.agent.metrics import Channel
    from cni.agent.plugins import PRELOAD, production_table
    from cni.agent.server import Agent
    from cni.agent.warmup import ipamd_channels, keep_ipamd_channels

    try:
        prepare = ipamd_channels(os.environ, args.ipamd)
    except ValueError as exc:
        logging.error("--ipamd: %s", exc)
        return 2
    # Made before anything is forked: every worker and the sidecar inherit it.
    attach = Channel() if args.metrics_listen else None
    table = production_table()
    agent = Agent(
        table,
        socket_path=args.socket,
        max_workers=args.max_workers,
        preload=PRELOAD,
        spares=args.spare_workers,
        prepare=prepare,
        requests_per_worker=args.requests_per_worker,
        worker_setup=keep_ipamd_channels,
        sidecar=(
            metrics_sidecar(
                args.metrics_listen, args.state_dir, args.sysfs_root, attach
            )
            if attach is not None
            else None
        ),
        metrics=attach,
        reconciler=reconciler(args, table),
    )
    agent.warm()
    try:
        agent.bind()
    except OSError as exc:
        logging.error("cannot listen on %s: %s", args.socket, exc)
        return 1
    agent.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
