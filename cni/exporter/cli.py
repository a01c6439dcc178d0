# SPDX-License-Identifier: Apache-2.0
"""``railyard-exporter``: the node's RDMA counters per pod on ``/metrics``."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

import click

from cni.exporter.collector import RdmaCollector, node_name
from cni.exporter.server import DEFAULT_LISTEN, build_collector, serve

DEFAULT_STATE_DIR = Path("/var/lib/cni/railyard")


def run(collector: RdmaCollector, listen: str) -> None:
    """Serve ``collector`` on ``listen`` until SIGTERM/SIGINT."""
    try:
        server = serve(listen, collector.render)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot listen on {listen}: {exc}") from None
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, help="HOST:PORT")
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    envvar="RAILYARD_STATE_DIR",
    help="The plugins' attachment records (RAILYARD_STATE_DIR).",
)
@click.option(
    "--sysfs-root", type=click.Path(path_type=Path), default=Path("/sys"), hidden=True
)
@click.option(
    "--node-name", "node", default="", help="default: RAILYARD_NODE_NAME, hostname"
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
def main(
    listen: str, state_dir: Path, sysfs_root: Path, node: str, log_level: str
) -> None:
    """Export RDMA hardware and vport counters of this node's pods (Spiderpool's
    metric names) for Prometheus."""
    setup_logging(log_level)
    collector = build_collector(state_dir, node or node_name(), sysfs_root)
    run(collector, listen)
