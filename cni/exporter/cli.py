# SPDX-License-Identifier: Apache-2.0
"""``railyard-exporter``: the node's RDMA counters per pod on ``/metrics``."""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

import click

from cni.exporter.collector import node_name
from cni.exporter.owners import KubeObjects, OwnerLabels
from cni.exporter.server import DEFAULT_LISTEN, Render, build_collector, serve

log = logging.getLogger("railyard-exporter")

DEFAULT_STATE_DIR = Path("/var/lib/cni/railyard")


def run(render: Render, listen: str) -> None:
    """Serve ``render()`` (e.g. ``RdmaCollector.render``) as ``/metrics`` on
    ``listen`` until SIGTERM/SIGINT."""
    try:
        server = serve(listen, render)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot listen on {listen}: {exc}") from None
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()


def owner_labels_from(
    kubeconfig: Path | None, wanted: bool, environ: Mapping[str, str] | None = None
) -> OwnerLabels | None:
    """The owner-label lookups: through ``kubeconfig`` when given, else the
    service account when running in a pod, else none (labels stay empty)."""
    environ = os.environ if environ is None else environ
    in_pod = bool(environ.get("KUBERNETES_SERVICE_HOST"))
    if not wanted or (kubeconfig is None and not in_pod):
        return None
    if importlib.util.find_spec("kubernetes") is None:
        message = (
            "owner labels need the Kubernetes client: pip install "
            "'railyard-cni[webhook]' (packaging/install.sh --with-webhook)"
        )
        if kubeconfig is not None:
            raise click.ClickException(message)
        log.warning("%s; exporting without owner labels", message)
        return None
    from railyard.kube import KubeError, in_cluster_client, kubeconfig_client

    try:
        client = (
            kubeconfig_client(kubeconfig)
            if kubeconfig is not None
            else in_cluster_client(environ=environ)
        )
    except KubeError as exc:
        raise click.ClickException(f"owner labels: {exc}") from None
    return OwnerLabels(KubeObjects(client))


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
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="read pod owners through this kubeconfig (in a pod: its service account)",
)
@click.option(
    "--owner-labels/--no-owner-labels",
    default=True,
    show_default=True,
    help="label pod series with their top-level workload (needs a Kubernetes API)",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
def main(
    listen: str,
    state_dir: Path,
    sysfs_root: Path,
    node: str,
    kubeconfig: Path | None,
    owner_labels: bool,
    log_level: str,
) -> None:
    """Export RDMA hardware and vport counters of this node's pods (Spiderpool's
    metric names) for Prometheus."""
    setup_logging(log_level)
    owners = owner_labels_from(kubeconfig, owner_labels)
    collector = build_collector(
        state_dir, node or node_name(), sysfs_root, owners=owners
    )
    try:
        run(collector.render, listen)
    finally:
        if owners is not None:
            owners.close()
