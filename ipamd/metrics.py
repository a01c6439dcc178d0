# SPDX-License-Identifier: Apache-2.0
"""ipamd's Prometheus metrics, served on their own listen address.

Everything metric-shaped lives here; the servicer, engine and server call a
few small hooks (``allocated``, ``released``, ``gc_released``, ``rpc_error``,
``batch``) and stay free of prometheus_client. Pool gauges are computed at
scrape time from the allocation state, read on the engine's writer like any
RPC, so they always agree with ``ipamd pool list``.

Names are part of the product: dashboards and alerts query them, and
``tests/unit/ipamd/test_ipamd_metrics.py`` pins every one (Spiderpool's IPAM
dashboard went blank when a lint fix renamed its metrics, issue #5827).

Imports prometheus_client; loaded by ``ipamd serve`` only when metrics are on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

ALLOCATIONS = "ipamd_allocations"  # counter: ipamd_allocations_total
RELEASES = "ipamd_releases"
ALLOCATION_SECONDS = "ipamd_allocation_duration_seconds"
GC_RELEASES = "ipamd_gc_releases"
RPC_ERRORS = "ipamd_rpc_errors"
BATCH_SIZE = "ipamd_commit_batch_size"
POOL_CAPACITY = "ipamd_pool_capacity_ips"
POOL_ALLOCATED = "ipamd_pool_allocated_ips"
POOL_FREE = "ipamd_pool_free_ips"
UP = "ipamd_store_up"

#: From a warm in-memory allocation (~1 ms) to a commit stuck behind a slow
#: disk; Spiderpool's 0.1 s..15 s buckets would put every allocation of ours
#: in the first one.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class PoolUsageView(Protocol):
    """What the gauges read of ``ipamd.allocator.PoolUsage``."""

    @property
    def total(self) -> int: ...
    @property
    def allocated(self) -> int: ...


class _PoolGauges(Collector):
    """Capacity, allocated and free addresses per pool, read at scrape time."""

    def __init__(
        self, usage: Callable[[], Iterable[tuple[str, int, PoolUsageView]]]
    ) -> None:
        self._usage = usage

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        labels = ["pool", "ip_version"]
        capacity = GaugeMetricFamily(
            POOL_CAPACITY, "addresses a pool can hand out", labels=labels
        )
        allocated = GaugeMetricFamily(
            POOL_ALLOCATED, "addresses of a pool in use", labels=labels
        )
        free = GaugeMetricFamily(
            POOL_FREE, "addresses of a pool still free", labels=labels
        )
        up = 1
        try:
            rows = list(self._usage())
        except Exception as exc:  # a scrape must not fail because the store did
            log.warning("pool usage unavailable for metrics: %s", exc)
            rows, up = [], 0
        for name, version, usage in rows:
            values = [name, str(version)]
            capacity.add_metric(values, usage.total)
            allocated.add_metric(values, usage.allocated)
            free.add_metric(values, usage.total - usage.allocated)
        yield capacity
        yield allocated
        yield free
        yield GaugeMetricFamily(
            UP, "1 when the allocation state could be read", value=up
        )


class IpamdMetrics:
    """ipamd's metrics on a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.allocations = Counter(
            ALLOCATIONS,
            "allocation requests by pool and result (ok, or the gRPC code)",
            ["pool", "result"],
            registry=r,
        )
        self.releases = Counter(
            RELEASES,
            "released addresses (ok) or failed release requests, by pool",
            ["pool", "result"],
            registry=r,
        )
        self.latency = Histogram(
            ALLOCATION_SECONDS,
            "Allocate RPC time from decode to committed reply",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.gc = Counter(
            GC_RELEASES, "addresses released by garbage collection", registry=r
        )
        self.errors = Counter(
            RPC_ERRORS,
            "failed RPCs by method and gRPC code",
            ["method", "code"],
            registry=r,
        )
        self.batches = Histogram(
            BATCH_SIZE,
            "requests committed together by one group commit",
            buckets=BATCH_BUCKETS,
            registry=r,
        )

    def watch_pools(
        self, usage: Callable[[], Iterable[tuple[str, int, PoolUsageView]]]
    ) -> None:
        """Export the pool gauges from ``usage()``: (pool, ip version, usage)."""
        self.registry.register(_PoolGauges(usage))

    # -- hooks ------------------------------------------------------------

    def allocated(self, pools: Sequence[str], seconds: float) -> None:
        for pool in pools:
            self.allocations.labels(pool, "ok").inc()
        self.latency.observe(seconds)

    def allocation_failed(self, pools: Sequence[str], code: str) -> None:
        for pool in pools or ("",):
            self.allocations.labels(pool, code).inc()

    def released(self, pools: Sequence[str]) -> None:
        for pool in pools:
            self.releases.labels(pool, "ok").inc()

    def release_failed(self, code: str) -> None:
        self.releases.labels("", code).inc()

    def gc_released(self, addresses: int) -> None:
        self.gc.inc(addresses)

    def rpc_error(self, method: str, code: str) -> None:
        self.errors.labels(method, code).inc()

    def batch(self, size: int) -> None:
        self.batches.observe(size)


def metric_names(metrics: IpamdMetrics) -> set[str]:
    """Every sample name the registry exposes (for the name-pinning test)."""
    return {s.name for family in metrics.registry.collect() for s in family.samples}


class MetricsEndpoint:
    """``/metrics`` of one registry on ``host:port`` (a daemon thread)."""

    def __init__(self, listen: str, registry: CollectorRegistry) -> None:
        from prometheus_client import MetricsHandler

        from ipamd.http_endpoint import HttpEndpoint, parse_listen

        host, port = parse_listen(listen)
        self._endpoint = HttpEndpoint(
            host, port, MetricsHandler.factory(registry), "ipamd-metrics"
        )
        self.address = self._endpoint.address
        log.info("metrics on http://%s/metrics", self.address)

    def stop(self) -> None:
        self._endpoint.stop()
