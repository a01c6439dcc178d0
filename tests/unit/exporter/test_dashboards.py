# SPDX-License-Identifier: Apache-2.0
"""Every PromQL expression of the Grafana dashboards parses and queries only
metrics (and labels) our exporters serve.

The expressions are parsed by promql-parser (Python bindings of GreptimeDB's
Rust PromQL parser), not by a regular expression: function names, label
matchers and grouping clauses cannot be mistaken for metric names. The served
names come from running the exporters' own code, not from a list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import promql_parser as pp
import pytest
from prometheus_client import CollectorRegistry

from cni import timings
from cni.agent.metrics import AttachMetrics, Sample
from ipamd.metrics import IpamdMetrics, metric_names
from tests.doubles.rdma_node import RdmaNode

GRAFANA = Path(__file__).resolve().parents[3] / "packaging" / "grafana"
BOARDS = sorted(GRAFANA.glob("*.json"))
#: Grafana's interval macros, then any dashboard variable.
MACRO = re.compile(r"\$__(rate_interval|interval|range)")
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
LABEL_VALUES = re.compile(r"^label_values\((?:(.+),\s*)?(\w+)\)$")
#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"instance", "job"}


def expressions(board: dict) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every variable query; a
    ``label_values(selector, label)`` query yields its selector."""
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for var in board["templating"]["list"]:
        if var.get("type") != "query":
            continue
        match = LABEL_VALUES.match(var["query"]["query"])
        assert match, f"variable {var['name']}: not label_values(...)"
        yield f"variable {var['name']}", match.group(1)


def concrete(expr: str) -> str:
    return VARIABLE.sub("x", MACRO.sub("5m", expr))


def selectors(node: object) -> Iterator[pp.VectorSelector]:
    if isinstance(node, pp.VectorSelector):
        yield node
    elif isinstance(node, pp.MatrixSelector):
        yield node.vector_selector
    elif isinstance(node, pp.Call):
        for arg in node.args:
            yield from selectors(arg)
    elif isinstance(node, pp.AggregateExpr):
        yield from selectors(node.expr)
        if node.param is not None:
            yield from selectors(node.param)
    elif isinstance(node, pp.BinaryExpr):
        yield from selectors(node.lhs)
        yield from selectors(node.rhs)
    elif isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
        yield from selectors(node.expr)
    else:
        assert isinstance(node, pp.NumberLiteral | pp.StringLiteral), type(node)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Sample name -> label names, from the RDMA collector on a fake node and
    from ipamd's metrics with every hook exercised."""
    node = RdmaNode(tmp_path_factory.mktemp("node"))
    node.pod_nic(node.pf(1), 0, "trainer-0")
    out: dict[str, set[str]] = {}
    for family in node.collector().collect():
        for s in family.samples:
            out.setdefault(s.name, set()).update(s.labels)
    metrics = IpamdMetrics()
    metrics.allocated(["p"], 0.001)
    metrics.allocation_failed(["p"], "RESOURCE_EXHAUSTED")
    metrics.released(["p"])
    metrics.gc_released(1)
    metrics.rpc_error("Allocate", "NOT_FOUND")
    metrics.batch(3)

    class Usage:
        total, allocated = 10, 1

    metrics.watch_pools(lambda: [("p", 4, Usage())])
    for family in metrics.registry.collect():
        for s in family.samples:
            out.setdefault(s.name, set()).update(s.labels)
    assert set(out) >= metric_names(metrics)
    attach = CollectorRegistry()
    AttachMetrics(attach, "node-a").observe(
        Sample("sriov", "ADD", "success", 0.05, [(timings.MOVE, 0.01)])
    )
    for family in attach.collect():
        for s in family.samples:
            out.setdefault(s.name, set()).update(s.labels)
    return out


def test_there_are_five_dashboards() -> None:
    assert [p.name for p in BOARDS] == [
        "ipam.json",
        "rdma-cluster.json",
        "rdma-node.json",
        "rdma-pod.json",
        "rdma-workload.json",
    ]


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.stem)
def test_every_expression_queries_served_metrics_and_labels(
    path: Path, served: dict[str, set[str]]
) -> None:
    board = json.loads(path.read_text())
    checked = 0
    for where, expr in expressions(board):
        try:
            tree = pp.parse(concrete(expr))
        except ValueError as exc:
            pytest.fail(f"{path.name} {where}: {expr!r} does not parse: {exc}")
        found = list(selectors(tree))
        assert found, f"{path.name} {where}: {expr!r} selects no metric"
        for vs in found:
            assert vs.name in served, f"{path.name} {where}: {vs.name} is not exported"
            labels = {m.name for m in vs.matchers.matchers}
            unknown = labels - served[vs.name] - TARGET_LABELS
            assert not unknown, f"{path.name} {where}: {vs.name} has no {unknown}"
            checked += 1
    assert checked >= 10
