# SPDX-License-Identifier: Apache-2.0
"""What ADD records about the pod, and the ethtool and HTTP edges: the tests that
serve /metrics on a socket.

The rest of them, in-process, are in tests/unit/exporter/test_exporter_records.py (the
unit tier).
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cni.exporter.server import register, serve
from tests.doubles.rdma_node import RdmaNode

pytestmark = pytest.mark.integration


def test_collector_mounts_on_any_registry_and_serves_metrics(tmp_path: Path) -> None:
    node = RdmaNode(tmp_path)
    node.pod_nic(node.pf(1), 0, "trainer-0")
    collector = node.collector()
    registry = CollectorRegistry()
    register(registry, collector)
    via_registry = parse(generate_latest(registry).decode())
    server = serve("127.0.0.1:0", collector.render)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            served = parse(reply.read().decode())
    finally:
        server.stop()
    assert any(k[:2] == ("rdma_out_of_sequence_total", "trainer-0") for k in served)
    # The direct rendering is the registry's exposition, series for series
    # (but the scrape's own duration).
    duration = "railyard_exporter_scrape_duration_seconds"
    assert {k: v for k, v in served.items() if k[0] != duration} == {
        k: v for k, v in via_registry.items() if k[0] != duration
    }


def parse(text: str) -> dict[tuple[str, str, str], float]:
    """(sample name, pod, all labels) -> value, through prometheus_client's
    own parser (so the rendered text must be valid exposition format)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, s.labels.get("pod_name", ""), str(sorted(s.labels.items())))
            out[key] = s.value
    return out
