# SPDX-License-Identifier: Apache-2.0
"""Mount the RDMA collector on a registry, or serve it on ``/metrics``.

The node agent (or any other daemon) reuses the collector either way:
``register(registry, collector)`` adds it to a prometheus_client registry it
already serves; ``serve(listen, collector.render)`` serves it on an address of
its own through the collector's direct text rendering, which costs a third of
the CPU of the registry path at 64 devices (the budget is 100 ms a scrape).
The ``railyard-exporter`` CLI is ``build_collector`` + ``serve`` + wait.

Imports prometheus_client and the stdlib HTTP endpoint ipamd serves its own
``/metrics`` with; the ethtool adapter (pyroute2) only when the real sources
are built.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from prometheus_client import CollectorRegistry

from cni.exporter.collector import RdmaCollector
from cni.exporter.owners import OwnerLabels
from cni.kernel.stats import NetdevStatsSource, RdmaStatsSource, SysfsRdmaStats
from cni.kernel.sysfs import Sysfs
from ipamd.http_endpoint import HttpEndpoint, parse_listen

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "0.0.0.0:9435"


def build_collector(
    state_dir: Path | str,
    node: str,
    sysfs_root: Path | str = "/sys",
    rdma: RdmaStatsSource | None = None,
    netdev: NetdevStatsSource | None = None,
    owners: OwnerLabels | None = None,
) -> RdmaCollector:
    """The collector over the node's records and sources (real ones unless
    given: the simulated host passes its own)."""
    if netdev is None:
        from cni.kernel.ethtool import EthtoolStats

        netdev = EthtoolStats()
    if rdma is None:
        from cni.kernel.rdma_stats import NetlinkRdmaStats

        rdma = NetlinkRdmaStats(SysfsRdmaStats(sysfs_root))
    return RdmaCollector(
        state_dir=state_dir,
        sysfs=Sysfs(root=Path(sysfs_root)),
        rdma=rdma,
        netdev=netdev,
        node=node,
        owners=owners,
    )


def register(registry: CollectorRegistry, collector: RdmaCollector) -> None:
    """Add the RDMA families to ``registry`` (e.g. the node agent's)."""
    registry.register(collector)


#: The text exposition format ``RdmaCollector.render`` writes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Render = Callable[[], bytes]


class _Handler(BaseHTTPRequestHandler):
    render: Render  # set on the per-server subclass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send_error(404, "try /metrics")
            return
        try:
            body = self.render()
        except Exception:  # a scrape failure is the scraper's 500, not a crash
            log.exception("collection failed")
            self.send_error(500, "collection failed; see the exporter's log")
            return
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def serve(listen: str, render: Render) -> HttpEndpoint:
    """Serve ``render()`` (e.g. ``RdmaCollector.render``) as ``/metrics`` on
    ``listen`` from a daemon thread; ``port`` is the bound one (0 picks)."""
    host, port = parse_listen(listen)
    handler = type("RdmaMetricsHandler", (_Handler,), {"render": staticmethod(render)})
    endpoint = HttpEndpoint(host, port, handler, "rdma-metrics")
    log.info("RDMA metrics on http://%s/metrics", endpoint.address)
    return endpoint
