# SPDX-License-Identifier: Apache-2.0
"""Mount the RDMA collector on a registry and serve ``/metrics``.

The node agent (or any other daemon) reuses the collector with ``register``
on its own registry, or ``serve`` on an address of its own; the
``railyard-exporter`` CLI is ``build_collector`` + ``serve`` + wait.

Imports prometheus_client; the ethtool adapter (pyroute2) only when the real
sources are built.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from cni.exporter.collector import RdmaCollector
from cni.exporter.sources import NetdevStatsSource, RdmaStatsSource, SysfsRdmaStats
from cni.kernel.sysfs import Sysfs

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "0.0.0.0:9435"


def build_collector(
    state_dir: Path | str,
    node: str,
    sysfs_root: Path | str = "/sys",
    rdma: RdmaStatsSource | None = None,
    netdev: NetdevStatsSource | None = None,
) -> RdmaCollector:
    """The collector over the node's records and sources (real ones unless
    given: the simulated host passes its own)."""
    if netdev is None:
        from cni.exporter.ethtool import EthtoolStats

        netdev = EthtoolStats()
    return RdmaCollector(
        state_dir=state_dir,
        sysfs=Sysfs(root=Path(sysfs_root)),
        rdma=rdma if rdma is not None else SysfsRdmaStats(sysfs_root),
        netdev=netdev,
        node=node,
    )


def register(registry: CollectorRegistry, collector: RdmaCollector) -> None:
    """Add the RDMA families to ``registry`` (e.g. the node agent's)."""
    registry.register(collector)


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); ValueError otherwise."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"listen address {listen!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; ``port`` is the bound one (0 picks)."""

    server: WSGIServer
    thread: threading.Thread
    host: str
    port: int

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve(listen: str, registry: CollectorRegistry) -> MetricsServer:
    """Serve ``registry`` on ``listen`` from a daemon thread."""
    host, port = parse_listen(listen)
    server, thread = start_http_server(port, addr=host, registry=registry)
    bound = int(server.server_address[1])
    log.info("metrics on http://%s:%d/metrics", host, bound)
    return MetricsServer(server, thread, host, bound)
