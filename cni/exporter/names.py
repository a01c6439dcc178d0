# SPDX-License-Identifier: Apache-2.0
"""Metric and label names of the RDMA exporter, exactly as Spiderpool's.

Spiderpool (``pkg/rdmametrics``) registers every value as an observable
counter, so Prometheus sees ``<name>_total``, and its Grafana dashboards query
those names, the two "gauges" (``rdma_vport_speed_mbps_total``,
``rdma_device_tos_total``) included. Existing dashboards and alerts keep
working only if these strings never change: ``tests/unit/exporter`` pins them.

Standard library only.
"""

from __future__ import annotations

import re
from functools import lru_cache

PREFIX = "rdma_"

#: Counters of ``rdma statistic`` (= sysfs ``hw_counters``) Spiderpool knows,
#: grouped by what they tell an operator (the dashboards' rows).
REQUEST_COUNTERS: tuple[str, ...] = (
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rx_dct_connect",
)
ERROR_COUNTERS: tuple[str, ...] = (
    "out_of_buffer",
    "out_of_sequence",
    "duplicate_request",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "resp_local_length_error",
    "resp_cqe_error",
    "req_cqe_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_cqe_flush_error",
    "req_cqe_flush_error",
    "rx_icrc_encapsulated",
)
ROCE_COUNTERS: tuple[str, ...] = (
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
)
CONGESTION_COUNTERS: tuple[str, ...] = (
    "rp_cnp_ignored",
    "rp_cnp_handled",
    "np_ecn_marked_roce_packets",
    "np_cnp_sent",
)
#: All of them, in Spiderpool's order.
HW_COUNTERS: tuple[str, ...] = (
    *REQUEST_COUNTERS,
    *ERROR_COUNTERS[:-1],
    *ROCE_COUNTERS,
    *CONGESTION_COUNTERS,
    ERROR_COUNTERS[-1],
)

#: ethtool statistics of the netdev whose name contains ``vport`` (mlx5).
VPORT_COUNTERS: tuple[str, ...] = tuple(
    f"{d}_vport_rdma_{cast}_{unit}"
    for d in ("rx", "tx")
    for cast in ("unicast", "multicast")
    for unit in ("packets", "bytes")
)

#: ``{rx,tx}_prio<N>_{pause,discards}`` become ``rdma_{rx,tx}_{pause,discards}``
#: with label ``priority=N``.
PRIORITY_STAT = re.compile(r"^(rx|tx)_prio(\d+)_(pause|discards)$")
PRIORITY_COUNTERS: tuple[str, ...] = (
    "rx_pause",
    "tx_pause",
    "rx_discards",
    "tx_discards",
)

SPEED = "vport_speed_mbps"
TOS = "device_tos"

#: Every device's labels, in Spiderpool's order, then the pod's.
#: The pod's top-level workload (``cni.exporter.owners``); empty without a
#: Kubernetes API, for host devices and until the owner is looked up.
OWNER_LABELS: tuple[str, ...] = (
    "owner_api_version",
    "owner_kind",
    "owner_namespace",
    "owner_name",
)
#: Ours, after Spiderpool's: where the device sits (its PCIe root complex,
#: "pci0000:15", and NUMA node; empty when sysfs does not say), so a
#: dashboard can tell a GPU-affine rail from one across the sockets.
TOPOLOGY_LABELS: tuple[str, ...] = ("pcie_root", "numa_node")
DEVICE_LABELS: tuple[str, ...] = (
    "node_name",
    "ifname",
    "net_dev_name",
    "node_guid",
    "sys_image_guid",
    "is_root",
    "rdma_parent_name",
    "pod_namespace",
    "pod_name",
    *OWNER_LABELS,
    *TOPOLOGY_LABELS,
)
PRIORITY_LABELS: tuple[str, ...] = (*DEVICE_LABELS, "priority")
#: ``rdma_device_tos`` carries only these (Spiderpool ``tos.go``).
TOS_LABELS: tuple[str, ...] = ("node_name", "ifname", "net_dev_name")

#: The exporter's own health.
SCRAPE_DURATION = "railyard_exporter_scrape_duration_seconds"
DEVICES = "railyard_exporter_devices"
READ_ERRORS = "railyard_exporter_read_errors"  # a counter: ..._total

_BAD = re.compile(r"[^a-zA-Z0-9_]")


@lru_cache(maxsize=4096)
def metric_name(counter: str) -> str:
    """``rdma_<counter>`` for a hw counter or ethtool stat, sanitised as
    Prometheus requires (a driver may report names with ``-`` or ``.``)."""
    return PREFIX + _BAD.sub("_", counter)


def known_names() -> tuple[str, ...]:
    """Every exported family name Spiderpool defines (without ``_total``)."""
    return tuple(
        metric_name(n)
        for n in (*HW_COUNTERS, *VPORT_COUNTERS, *PRIORITY_COUNTERS, SPEED, TOS)
    )
