# SPDX-License-Identifier: Apache-2.0
"""Write the Grafana dashboards in this directory (run after editing it).

    python3 packaging/grafana/generate.py           # rewrite the JSON files
    python3 packaging/grafana/generate.py --check   # exit 1 if they are stale

Five dashboards, shaped like Spiderpool's (its RDMA cluster/node/pod/workload and IPAM
dashboards) and querying the same metric names, so its users find their
panels; ``tests/unit/exporter/test_dashboards.py`` parses every PromQL
expression and checks each metric exists in what our exporters serve.

Standard library and ``cni.exporter.names`` only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The counter names are the exporter's own (standard library only).
sys.path.insert(0, str(HERE.parents[1]))
from cni.exporter import names  # noqa: E402

RATE = "[$__rate_interval]"
BYTES = ("unicast", "multicast")
ERRORS = names.ERROR_COUNTERS
CONGESTION = names.CONGESTION_COUNTERS
ROCE = names.ROCE_COUNTERS
REQUESTS = names.REQUEST_COUNTERS


def bits(direction: str, sel: str, by: str) -> str:
    """Bits per second of both vport byte counters in one direction."""
    parts = [
        f"rate(rdma_{direction}_vport_rdma_{cast}_bytes_total{{{sel}}}{RATE})"
        for cast in BYTES
    ]
    return f"sum by ({by}) ({' + '.join(parts)}) * 8"


class Board:
    """A dashboard being laid out: panels flow left to right, 24 columns."""

    def __init__(self, uid: str, title: str, tags: list[str]) -> None:
        self.uid, self.title, self.tags = uid, title, tags
        self.panels: list[dict[str, Any]] = []
        self.variables: list[dict[str, Any]] = []
        self.x = self.y = 0
        self.next_id = 1

    def variable(self, name: str, query: str, multi: bool = True) -> None:
        self.variables.append(
            {
                "name": name,
                "label": name,
                "type": "query",
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "query": {"query": query, "refId": f"var-{name}"},
                "definition": query,
                "refresh": 2,
                "multi": multi,
                "includeAll": multi,
                "allValue": ".*" if multi else None,
                "sort": 1,
            }
        )

    def row(self, title: str) -> None:
        self._place(24, 1)
        self.panels.append(
            {
                "id": self._id(),
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": self._grid(24, 1),
                "panels": [],
            }
        )
        self._advance(24, 1)

    def rate_panels(
        self, counters: tuple[str, ...], sel: str, by: str, width: int = 6
    ) -> None:
        """One panel per counter: its rate summed by the labels ``by``."""
        legend = " ".join("{{" + label.strip() + "}}" for label in by.split(","))
        for name in counters:
            self.panel(
                name,
                [(f"sum by ({by}) (rate(rdma_{name}_total{{{sel}}}{RATE}))", legend)],
                unit="ops",
                width=width,
            )

    def panel(
        self,
        title: str,
        targets: list[tuple[str, str]],
        unit: str = "short",
        kind: str = "timeseries",
        width: int = 12,
        height: int = 8,
    ) -> None:
        self._place(width, height)
        self.panels.append(
            {
                "id": self._id(),
                "type": kind,
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": self._grid(width, height),
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "table", "placement": "bottom"}},
                "targets": [
                    {
                        "refId": chr(ord("A") + i),
                        "expr": expr,
                        "legendFormat": legend,
                        "instant": kind in ("table", "stat", "bargauge"),
                    }
                    for i, (expr, legend) in enumerate(targets)
                ],
            }
        )
        self._advance(width, height)

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _place(self, width: int, height: int) -> None:
        if self.x + width > 24:
            self.x, self.y = 0, self.y + self._row_height
        self._row_height = max(getattr(self, "_row_height", 0), height)

    def _grid(self, width: int, height: int) -> dict[str, int]:
        return {"x": self.x, "y": self.y, "w": width, "h": height}

    def _advance(self, width: int, height: int) -> None:
        self.x += width
        if self.x >= 24:
            self.x, self.y, self._row_height = 0, self.y + height, 0

    def to_json(self) -> dict[str, Any]:
        datasource = {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
        }
        return {
            "uid": self.uid,
            "title": self.title,
            "tags": self.tags,
            "timezone": "browser",
            "schemaVersion": 39,
            "version": 1,
            "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"},
            "templating": {"list": [datasource, *self.variables]},
            "panels": self.panels,
        }


def cluster() -> Board:
    b = Board("railyard-rdma-cluster", "Railyard RDMA Cluster", ["railyard", "rdma"])
    root = 'is_root="true"'
    pods = 'pod_name!=""'
    b.panel(
        "Nodes",
        [("count(count by (node_name) (rdma_vport_speed_mbps_total))", "")],
        kind="stat",
        width=8,
        height=4,
    )
    b.panel(
        "Pods with RDMA NICs",
        [
            (
                f"count(count by (pod_namespace, pod_name) (rdma_vport_speed_mbps_total{{{pods}}}))",
                "",
            )
        ],
        kind="stat",
        width=8,
        height=4,
    )
    b.panel(
        "RDMA NICs in pods",
        [(f"count(rdma_vport_speed_mbps_total{{{pods}}})", "")],
        kind="stat",
        width=8,
        height=4,
    )
    b.panel(
        "Cluster throughput (PFs)",
        [(bits("rx", root, ""), "read (rx)"), (bits("tx", root, ""), "write (tx)")],
        unit="bps",
    )
    b.panel(
        "Throughput by node (PFs, rx)",
        [(bits("rx", root, "node_name"), "{{node_name}}")],
        unit="bps",
    )
    b.panel(
        "Utilisation by node (PFs, rx)",
        [
            (
                f"{bits('rx', root, 'node_name')} / (sum by (node_name) "
                f"(rdma_vport_speed_mbps_total{{{root}}}) * 1e6) * 100",
                "{{node_name}}",
            )
        ],
        unit="percent",
    )
    b.panel(
        "Top 10 pods by rx",
        [
            (
                f"topk(10, {bits('rx', pods, 'pod_namespace, pod_name')})",
                "{{pod_namespace}}/{{pod_name}}",
            )
        ],
        unit="bps",
    )
    b.row("PF health")
    for name in (
        "rx_pause",
        "tx_pause",
        "rx_discards",
        "tx_discards",
        *CONGESTION,
        "out_of_sequence",
    ):
        b.panel(
            f"{name} by node (PFs)",
            [
                (
                    f"sum by (node_name) (rate(rdma_{name}_total{{{root}}}{RATE}))",
                    "{{node_name}}",
                )
            ],
            unit="ops",
            width=8,
        )
    b.row("Pods")
    for name in ("out_of_sequence", "rx_discards"):
        b.panel(
            f"Top 10 pods by {name}",
            [
                (
                    f"topk(10, sum by (pod_namespace, pod_name) "
                    f"(rate(rdma_{name}_total{{{pods}}}{RATE})))",
                    "{{pod_namespace}}/{{pod_name}}",
                )
            ],
            unit="ops",
        )
    return b


def node() -> Board:
    b = Board("railyard-rdma-node", "Railyard RDMA Node", ["railyard", "rdma"])
    b.variable("node", "label_values(rdma_vport_speed_mbps_total, node_name)")
    n = 'node_name=~"$node"'
    host, pod = f'{n}, is_root="true"', f'{n}, pod_name!=""'
    b.panel(
        "Host devices: throughput",
        [
            (bits("rx", host, "net_dev_name"), "{{net_dev_name}} rx"),
            (bits("tx", host, "net_dev_name"), "{{net_dev_name}} tx"),
        ],
        unit="bps",
    )
    b.panel(
        "Host devices: utilisation (rx)",
        [
            (
                f"{bits('rx', host, 'net_dev_name')} / (sum by (net_dev_name) "
                f"(rdma_vport_speed_mbps_total{{{host}}}) * 1e6) * 100",
                "{{net_dev_name}}",
            )
        ],
        unit="percent",
    )
    b.panel(
        "Pod devices: throughput (rx) by parent",
        [
            (
                bits("rx", pod, "rdma_parent_name, pod_name, net_dev_name"),
                "{{rdma_parent_name}} {{pod_name}}/{{net_dev_name}}",
            )
        ],
        unit="bps",
    )
    b.panel(
        "Pod devices: throughput (tx) by parent",
        [
            (
                bits("tx", pod, "rdma_parent_name, pod_name, net_dev_name"),
                "{{rdma_parent_name}} {{pod_name}}/{{net_dev_name}}",
            )
        ],
        unit="bps",
    )
    b.row("Priority flow control")
    for name in ("rx_pause", "tx_pause", "rx_discards", "tx_discards"):
        b.panel(
            f"{name} by priority",
            [
                (
                    f"sum by (net_dev_name, priority) (rate(rdma_{name}_total{{{n}}}{RATE}))",
                    "{{net_dev_name}} prio {{priority}}",
                )
            ],
            unit="ops",
            width=6,
        )
    b.row("Congestion")
    b.rate_panels((*CONGESTION, "out_of_sequence"), n, "ifname, net_dev_name", 8)
    b.row("Detail: errors")
    b.rate_panels(ERRORS, n, "ifname, pod_name")
    b.row("RoCE")
    b.rate_panels(ROCE, n, "ifname", 8)
    b.row("QoS and exporter")
    b.panel(
        "Traffic class of host devices",
        [(f"rdma_device_tos_total{{{n}}}", "{{ifname}} {{net_dev_name}}")],
        kind="table",
    )
    b.panel(
        "Exporter: collection time and read errors",
        [
            ("railyard_exporter_scrape_duration_seconds", "{{instance}}"),
            (
                f"sum by (instance, source) (rate(railyard_exporter_read_errors_total{RATE}))",
                "read errors {{instance}} {{source}}",
            ),
        ],
        unit="s",
    )
    attach_latency(b, n)
    return b


def attach_latency(b: Board, sel: str) -> None:
    """railyard-agent's attach latency (``cni.agent.metrics``): p99 of each
    CNI command, then of each step of ADD and of DEL, and the errors."""
    b.row("Attach latency (railyard-agent)")
    rate = f"{RATE}))"
    command = "railyard_cni_command_duration_seconds"
    step = "railyard_cni_step_duration_seconds"
    b.panel(
        "CNI commands: p99 by plugin and command",
        [
            (
                f"histogram_quantile(0.99, sum by (le, plugin, command) "
                f"(rate({command}_bucket{{{sel}}}{rate})",
                "{{plugin}} {{command}}",
            )
        ],
        unit="s",
    )
    b.panel(
        "CNI commands: errors",
        [
            (
                f"sum by (plugin, command) (rate({command}_count"
                f'{{{sel}, result="error"}}{rate}',
                "{{plugin}} {{command}}",
            )
        ],
        unit="ops",
    )
    for cni_command, what in (("ADD", "Attach"), ("DEL", "Detach")):
        b.panel(
            f"{what} latency per step ({cni_command}, p99)",
            [
                (
                    f"histogram_quantile(0.99, sum by (le, step) (rate({step}_bucket"
                    f'{{{sel}, command="{cni_command}"}}{rate})',
                    "{{step}}",
                )
            ],
            unit="s",
        )


def pod() -> Board:
    b = Board("railyard-rdma-pod", "Railyard RDMA Pod", ["railyard", "rdma"])
    b.variable(
        "namespace",
        'label_values(rdma_vport_speed_mbps_total{pod_name!=""}, pod_namespace)',
        multi=False,
    )
    b.variable(
        "pod",
        'label_values(rdma_vport_speed_mbps_total{pod_namespace="$namespace"}, pod_name)',
    )
    sel = 'pod_namespace="$namespace", pod_name=~"$pod"'
    b.panel(
        "Throughput per NIC",
        [
            (
                bits("rx", sel, "pod_name, net_dev_name, ifname"),
                "{{pod_name}} {{net_dev_name}} rx",
            ),
            (
                bits("tx", sel, "pod_name, net_dev_name, ifname"),
                "{{pod_name}} {{net_dev_name}} tx",
            ),
        ],
        unit="bps",
    )
    b.panel(
        "Utilisation per NIC (rx)",
        [
            (
                f"{bits('rx', sel, 'pod_name, net_dev_name')} / (sum by (pod_name, net_dev_name) "
                f"(rdma_vport_speed_mbps_total{{{sel}}}) * 1e6) * 100",
                "{{pod_name}} {{net_dev_name}}",
            )
        ],
        unit="percent",
    )
    for direction in ("rx", "tx"):
        for cast in BYTES:
            b.panel(
                f"{direction} {cast} packets",
                [
                    (
                        f"sum by (pod_name, net_dev_name) (rate(rdma_{direction}_vport_rdma_{cast}_packets_total{{{sel}}}{RATE}))",
                        "{{pod_name}} {{net_dev_name}}",
                    )
                ],
                unit="pps",
                width=6,
            )
    b.row("Requests and congestion")
    b.rate_panels((*REQUESTS, *CONGESTION), sel, "pod_name, net_dev_name")
    b.row("Errors")
    b.rate_panels(ERRORS, sel, "pod_name, net_dev_name")
    return b


def workload() -> Board:
    """Per workload (the owner labels: a Deployment, a PyTorchJob ...), as
    Spiderpool's AI-workload dashboard: one job's rails side by side."""
    b = Board("railyard-rdma-workload", "Railyard RDMA Workload", ["railyard", "rdma"])
    owned = 'rdma_vport_speed_mbps_total{owner_name!=""}'
    b.variable(
        "owner_namespace", f"label_values({owned}, owner_namespace)", multi=False
    )
    b.variable(
        "owner_kind",
        'label_values(rdma_vport_speed_mbps_total{owner_namespace="$owner_namespace"}, '
        "owner_kind)",
        multi=False,
    )
    b.variable(
        "owner_name",
        "label_values(rdma_vport_speed_mbps_total{"
        'owner_namespace="$owner_namespace", owner_kind="$owner_kind"}, owner_name)',
        multi=False,
    )
    sel = (
        'owner_namespace="$owner_namespace", owner_kind="$owner_kind", '
        'owner_name="$owner_name"'
    )
    b.panel(
        "Pods and RDMA NICs",
        [
            (
                f"count(count by (pod_name) (rdma_vport_speed_mbps_total{{{sel}}}))",
                "pods",
            ),
            (f"count(rdma_vport_speed_mbps_total{{{sel}}})", "NICs"),
        ],
    )
    for direction in ("rx", "tx"):
        b.panel(
            f"Throughput per pod ({direction})",
            [(bits(direction, sel, "pod_name"), "{{pod_name}}")],
            unit="bps",
        )
    b.row("Congestion and errors")
    b.rate_panels((*CONGESTION, *ERRORS), sel, "pod_name")
    return b


def ipam() -> Board:
    b = Board("railyard-ipam", "Railyard IPAM (ipamd)", ["railyard", "ipam"])
    b.variable("pool", "label_values(ipamd_pool_capacity_ips, pool)")
    p = 'pool=~"$pool"'
    b.panel(
        "Pools",
        [(f"count(ipamd_pool_capacity_ips{{{p}}})", "")],
        kind="stat",
        width=6,
        height=4,
    )
    b.panel(
        "Addresses in use",
        [(f"sum(ipamd_pool_allocated_ips{{{p}}})", "")],
        kind="stat",
        width=6,
        height=4,
    )
    b.panel(
        "Addresses free",
        [(f"sum(ipamd_pool_free_ips{{{p}}})", "")],
        kind="stat",
        width=6,
        height=4,
    )
    b.panel("Store up", [("min(ipamd_store_up)", "")], kind="stat", width=6, height=4)
    b.panel(
        "Pool utilisation",
        [
            (
                f"ipamd_pool_allocated_ips{{{p}}} / ipamd_pool_capacity_ips{{{p}}} * 100",
                "{{pool}}",
            )
        ],
        unit="percent",
    )
    b.panel(
        "Pool usage",
        [
            (f"ipamd_pool_capacity_ips{{{p}}}", "{{pool}} capacity"),
            (f"ipamd_pool_allocated_ips{{{p}}}", "{{pool}} allocated"),
            (f"ipamd_pool_free_ips{{{p}}}", "{{pool}} free"),
        ],
        kind="table",
    )
    b.row("Allocations")
    b.panel(
        "Allocations by pool and result",
        [
            (
                f"sum by (pool, result) (rate(ipamd_allocations_total{{{p}}}{RATE}))",
                "{{pool}} {{result}}",
            )
        ],
        unit="ops",
    )
    b.panel(
        "Allocation failures",
        [
            (
                f'sum by (pool, result) (increase(ipamd_allocations_total{{{p}, result!="ok"}}{RATE}))',
                "{{pool}} {{result}}",
            )
        ],
    )
    b.panel(
        "Allocation latency",
        [
            (
                f"histogram_quantile({q}, sum by (le) (rate(ipamd_allocation_duration_seconds_bucket{RATE})))",
                f"p{int(q * 100)}",
            )
            for q in (0.5, 0.9, 0.99)
        ]
        + [
            (
                f"rate(ipamd_allocation_duration_seconds_sum{RATE}) / rate(ipamd_allocation_duration_seconds_count{RATE})",
                "mean",
            )
        ],
        unit="s",
    )
    b.panel(
        "Releases by pool and result",
        [
            (
                f"sum by (pool, result) (rate(ipamd_releases_total{RATE}))",
                "{{pool}} {{result}}",
            )
        ],
        unit="ops",
    )
    b.row("Daemon")
    b.panel(
        "GC releases",
        [(f"increase(ipamd_gc_releases_total{RATE})", "released")],
        width=8,
    )
    b.panel(
        "RPC errors by code",
        [
            (
                f"sum by (method, code) (rate(ipamd_rpc_errors_total{RATE}))",
                "{{method}} {{code}}",
            )
        ],
        unit="ops",
        width=8,
    )
    b.panel(
        "Group commit: requests per batch",
        [
            (
                f"rate(ipamd_commit_batch_size_sum{RATE}) / rate(ipamd_commit_batch_size_count{RATE})",
                "mean",
            ),
            (
                f"histogram_quantile(0.99, sum by (le) (rate(ipamd_commit_batch_size_bucket{RATE})))",
                "p99",
            ),
        ],
        width=8,
    )
    return b


BOARDS = {
    "rdma-cluster.json": cluster,
    "rdma-node.json": node,
    "rdma-pod.json": pod,
    "rdma-workload.json": workload,
    "ipam.json": ipam,
}


def render() -> dict[str, str]:
    return {
        name: json.dumps(build().to_json(), indent=2) + "\n"
        for name, build in BOARDS.items()
    }


def main() -> int:
    stale = []
    for name, text in render().items():
        path = HERE / name
        if "--check" in sys.argv[1:]:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale dashboards (run {Path(__file__).name}): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
