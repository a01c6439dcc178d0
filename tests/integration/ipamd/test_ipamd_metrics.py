# SPDX-License-Identifier: Apache-2.0
"""ipamd's /metrics: the names are pinned, the values follow the RPCs.

A real ipamd (temporary unix socket, SQLite) with ``metrics_listen`` on a
loopback port; the endpoint is read over HTTP and parsed with
prometheus_client's own text parser.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cni.ipam import Attachment, IpamError, IpamRequest
from cni.ipam.grpc_client import IpamdClient
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION
from ipamd.server import ConfigError, Daemon, build
from ipamd.settings import Settings

pytestmark = pytest.mark.integration

#: Dashboards and alerts query these; renaming one is a breaking change
#: (Spiderpool issue #5827). Update packaging/grafana/ipam.json with them.
PINNED = {
    "ipamd_allocations_total",
    "ipamd_allocations_created",
    "ipamd_releases_total",
    "ipamd_releases_created",
    "ipamd_allocation_duration_seconds_bucket",
    "ipamd_allocation_duration_seconds_count",
    "ipamd_allocation_duration_seconds_sum",
    "ipamd_allocation_duration_seconds_created",
    "ipamd_gc_releases_total",
    "ipamd_gc_releases_created",
    "ipamd_rpc_errors_total",
    "ipamd_rpc_errors_created",
    "ipamd_commit_batch_size_bucket",
    "ipamd_commit_batch_size_count",
    "ipamd_commit_batch_size_sum",
    "ipamd_commit_batch_size_created",
    "ipamd_pool_capacity_ips",
    "ipamd_pool_allocated_ips",
    "ipamd_pool_free_ips",
    "ipamd_store_up",
}


@pytest.fixture
def metrics_daemon(short_dir: Path) -> Iterator[Daemon]:
    settings = Settings(
        db_url=f"sqlite:///{short_dir / 'ipamd.db'}",
        listen=str(short_dir / "run" / "ipamd.sock"),
        metrics_listen="127.0.0.1:0",
    )
    d = build(settings)
    try:
        yield d
    finally:
        d.stop(grace=None)


@pytest.fixture
def client(metrics_daemon: Daemon, rails_yaml: str) -> Iterator[IpamdClient]:
    assert metrics_daemon.socket is not None
    c = IpamdClient(str(metrics_daemon.socket), timeout=5)
    c.stub.ApplyPools(
        pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=rails_yaml)
    )
    try:
        yield c
    finally:
        c.close()


def scrape(d: Daemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert d.metrics is not None
    with urllib.request.urlopen(f"http://{d.metrics.address}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def req(cid: str, pool: str = "gpu1-net11") -> IpamRequest:
    return IpamRequest(
        network="rail1", container_id=cid, ifname="net1", ipv4_pools=(pool,)
    )


def test_every_metric_name_is_pinned(metrics_daemon: Daemon, client) -> None:
    client.allocate(req("a"))
    client.release("rail1", "a", "net1")
    client.gc("rail1", [])
    with pytest.raises(IpamError):
        client.allocate(req("x", pool="no-such-pool"))
    assert {name for name, _ in scrape(metrics_daemon)} == PINNED


def test_allocations_and_releases_count_by_pool_and_result(
    metrics_daemon: Daemon, client
) -> None:
    client.allocate(req("a", pool="tiny"))
    client.allocate(req("b", pool="tiny"))
    with pytest.raises(IpamError):
        client.allocate(req("c", pool="tiny"))
    client.release("rail1", "a", "net1")
    s = scrape(metrics_daemon)
    assert value(s, "ipamd_allocations_total", pool="tiny", result="ok") == 2
    assert (
        value(s, "ipamd_allocations_total", pool="tiny", result="RESOURCE_EXHAUSTED")
        == 1
    )
    assert value(s, "ipamd_releases_total", pool="tiny", result="ok") == 1
    assert (
        value(s, "ipamd_rpc_errors_total", method="Allocate", code="RESOURCE_EXHAUSTED")
        == 1
    )
    assert value(s, "ipamd_allocation_duration_seconds_count") == 2
    # Every write went through a group commit of at least one request.
    assert value(s, "ipamd_commit_batch_size_count") >= 4


def test_pool_gauges_match_pool_list(metrics_daemon: Daemon, client) -> None:
    for cid in ("a", "b", "c"):
        client.allocate(req(cid))
    client.allocate(req("t", pool="tiny"))
    s = scrape(metrics_daemon)
    listed = client.stub.ListPools(pb.ListPoolsRequest(client_version=API_VERSION))
    assert listed.pools
    for info in listed.pools:
        labels = dict(pool=info.pool.name, ip_version=str(info.pool.ip_version))
        # Decimal strings in the API; a /64's count is exact only to a float's
        # precision in Prometheus, which is what a dashboard shows.
        total, used = int(info.total_count), int(info.allocated_count)
        assert value(s, "ipamd_pool_capacity_ips", **labels) == float(total)
        assert value(s, "ipamd_pool_allocated_ips", **labels) == used
        assert value(s, "ipamd_pool_free_ips", **labels) == float(total - used)
    assert value(s, "ipamd_pool_allocated_ips", pool="tiny", ip_version="4") == 1
    assert value(s, "ipamd_store_up") == 1


def test_gc_releases_are_counted(metrics_daemon: Daemon, client) -> None:
    client.allocate(req("keep"))
    client.allocate(req("stale"))
    client.gc("rail1", [Attachment("keep", "net1")])
    assert value(scrape(metrics_daemon), "ipamd_gc_releases_total") == 1


def test_bad_metrics_address_is_a_config_error(short_dir: Path) -> None:
    settings = Settings(
        db_url="memory",
        listen=str(short_dir / "run" / "ipamd.sock"),
        metrics_listen="no-port",
    )
    with pytest.raises(ConfigError, match="HOST:PORT"):
        build(settings)
