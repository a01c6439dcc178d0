# SPDX-License-Identifier: Apache-2.0
"""The RDMA collector on a fake node: names, labels and which devices show."""

from __future__ import annotations

from pathlib import Path

import pytest

from cni.kernel.stats import parse_speed
from tests.doubles.rdma_node import NODE, RdmaNode, guid

#: Spiderpool's names as its dashboards query them (``_total``), and ours.
#: Renaming one breaks every dashboard and alert built on it.
PINNED_RDMA = {
    "rdma_rx_write_requests_total",
    "rdma_rx_read_requests_total",
    "rdma_rx_atomic_requests_total",
    "rdma_rx_dct_connect_total",
    "rdma_out_of_buffer_total",
    "rdma_out_of_sequence_total",
    "rdma_duplicate_request_total",
    "rdma_rnr_nak_retry_err_total",
    "rdma_packet_seq_err_total",
    "rdma_implied_nak_seq_err_total",
    "rdma_local_ack_timeout_err_total",
    "rdma_resp_local_length_error_total",
    "rdma_resp_cqe_error_total",
    "rdma_req_cqe_error_total",
    "rdma_req_remote_invalid_request_total",
    "rdma_req_remote_access_errors_total",
    "rdma_resp_remote_access_errors_total",
    "rdma_resp_cqe_flush_error_total",
    "rdma_req_cqe_flush_error_total",
    "rdma_roce_adp_retrans_total",
    "rdma_roce_adp_retrans_to_total",
    "rdma_roce_slow_restart_total",
    "rdma_roce_slow_restart_cnps_total",
    "rdma_roce_slow_restart_trans_total",
    "rdma_rp_cnp_ignored_total",
    "rdma_rp_cnp_handled_total",
    "rdma_np_ecn_marked_roce_packets_total",
    "rdma_np_cnp_sent_total",
    "rdma_rx_icrc_encapsulated_total",
    "rdma_rx_vport_rdma_unicast_packets_total",
    "rdma_rx_vport_rdma_unicast_bytes_total",
    "rdma_rx_vport_rdma_multicast_packets_total",
    "rdma_rx_vport_rdma_multicast_bytes_total",
    "rdma_tx_vport_rdma_unicast_packets_total",
    "rdma_tx_vport_rdma_unicast_bytes_total",
    "rdma_tx_vport_rdma_multicast_packets_total",
    "rdma_tx_vport_rdma_multicast_bytes_total",
    "rdma_vport_speed_mbps_total",
    "rdma_rx_pause_total",
    "rdma_tx_pause_total",
    "rdma_rx_discards_total",
    "rdma_tx_discards_total",
    "rdma_device_tos_total",
}
PINNED_SELF = {
    "railyard_exporter_scrape_duration_seconds",
    "railyard_exporter_devices",
    "railyard_exporter_read_errors_total",
}
DEVICE_LABELS = {
    "node_name",
    "ifname",
    "net_dev_name",
    "node_guid",
    "sys_image_guid",
    "is_root",
    "rdma_parent_name",
    "pod_namespace",
    "pod_name",
    "owner_api_version",
    "owner_kind",
    "owner_namespace",
    "owner_name",
}


@pytest.fixture
def node(tmp_path: Path) -> RdmaNode:
    return RdmaNode(tmp_path)


def samples(node: RdmaNode) -> list:
    return [s for family in node.collector().collect() for s in family.samples]


def series(node: RdmaNode, name: str, **match: str) -> dict[str, float]:
    """net_dev_name (+ priority) -> value of ``name`` where labels match."""
    out = {}
    for s in samples(node):
        if s.name == name and all(s.labels.get(k) == v for k, v in match.items()):
            key = s.labels["net_dev_name"]
            if "priority" in s.labels:
                key += f"/{s.labels['priority']}"
            out[key] = s.value
    return out


def test_exported_names_are_spiderpools_and_pinned(node: RdmaNode) -> None:
    pf = node.pf(1)
    node.pod_nic(pf, 0, "trainer-0")
    names = {s.name for s in samples(node)}
    assert names == PINNED_RDMA | PINNED_SELF


def test_pod_nic_carries_spiderpools_labels_and_the_pod(node: RdmaNode) -> None:
    pf = node.pf(1)
    node.pod_nic(
        pf, 0, "trainer-0", namespace="team-a", counters={"out_of_sequence": 7}
    )
    [s] = [
        s
        for s in samples(node)
        if s.name == "rdma_out_of_sequence_total" and s.labels["pod_name"]
    ]
    assert set(s.labels) == DEVICE_LABELS
    assert s.labels == {
        "node_name": NODE,
        "ifname": "mlx5_101",
        "net_dev_name": "net1",
        "node_guid": guid((1 << 16) + 1),
        "sys_image_guid": guid(1 << 16),
        "is_root": "false",
        "rdma_parent_name": "ens1f0",
        "pod_namespace": "team-a",
        "pod_name": "trainer-0",
        # without a Kubernetes API (owners: tests/unit/exporter/test_exporter_owners.py)
        "owner_api_version": "",
        "owner_kind": "",
        "owner_namespace": "",
        "owner_name": "",
    }
    assert s.value == 7


def test_pf_is_root_without_pod_labels(node: RdmaNode) -> None:
    node.pf(1)
    [s] = [s for s in samples(node) if s.name == "rdma_out_of_sequence_total"]
    assert (s.labels["is_root"], s.labels["net_dev_name"]) == ("true", "ens1f0")
    assert (s.labels["pod_name"], s.labels["rdma_parent_name"]) == ("", "")


def test_netns_outside_var_run_netns_is_found_through_the_record(
    node: RdmaNode,
) -> None:
    pf = node.pf(1)
    netns = node.netns("cni-5f1c6e0e-crio")  # e.g. CRI-O's or containerd's own dir
    node.pod_nic(
        pf, 0, "crio-pod", netns=netns, stats={"rx_vport_rdma_unicast_bytes": 42}
    )
    assert series(
        node, "rdma_rx_vport_rdma_unicast_bytes_total", pod_name="crio-pod"
    ) == {"net1": 42}
    assert netns in node.netdevs.calls


def test_shared_mode_device_stays_in_the_host_and_is_found_by_pci(
    node: RdmaNode,
) -> None:
    pf = node.pf(1)
    node.pod_nic(pf, 0, "shared-pod", isolation=False, counters={"np_cnp_sent": 3})
    assert series(node, "rdma_np_cnp_sent_total", pod_name="shared-pod") == {"net1": 3}


def test_chained_rdma_plugin_record_names_the_device(node: RdmaNode) -> None:
    pf = node.pf(1)
    node.pod_nic(pf, 1, "chained", chained_rdma=True, counters={"rp_cnp_handled": 9})
    [s] = [
        s
        for s in samples(node)
        if s.name == "rdma_rp_cnp_handled_total" and s.labels["pod_name"] == "chained"
    ]
    assert (s.labels["ifname"], s.value) == ("mlx5_102", 9)


def test_default_route_nic_on_a_rail_changes_nothing(node: RdmaNode) -> None:
    # Spiderpool maps by the source address of the pod's default route, which
    # podDefaultRouteNIC moves onto a rail; the record does not care.
    pf = node.pf(1)
    st = node.pod_nic(pf, 0, "dr-pod")
    assert st.routes == []  # the record, not the routes, names the pod
    assert series(node, "rdma_out_of_buffer_total", pod_name="dr-pod") == {"net1": 0}


def test_deleted_record_stops_the_export(node: RdmaNode) -> None:
    pf = node.pf(1)
    st = node.pod_nic(pf, 0, "gone")
    assert series(node, "rdma_out_of_buffer_total", pod_name="gone")
    node.delete_record(st)
    assert series(node, "rdma_out_of_buffer_total", pod_name="gone") == {}


def test_vanished_netns_stops_the_export_before_del(node: RdmaNode) -> None:
    pf = node.pf(1)
    st = node.pod_nic(pf, 0, "crashed")
    Path(st.netns).unlink()
    assert series(node, "rdma_out_of_buffer_total", pod_name="crashed") == {}


@pytest.mark.parametrize("stage", ["saved", "del-failed", "release-pending"])
def test_record_of_an_add_under_way_or_a_pod_leaving_is_not_exported(
    node: RdmaNode, stage: str
) -> None:
    pf = node.pf(1)
    node.pod_nic(pf, 0, "busy", stage=stage)
    assert series(node, "rdma_out_of_buffer_total", pod_name="busy") == {}


def test_counters_beyond_spiderpools_list_are_exported(node: RdmaNode) -> None:
    pf = node.pf(1)
    node.pod_nic(
        pf,
        0,
        "p",
        counters={"req_rnr_retries_exceeded": 4, "rx-odd.name": 1},
        stats={"rx_vport_rdma_extra_bytes": 8},
    )
    names = {s.name for s in samples(node)}
    assert {
        "rdma_req_rnr_retries_exceeded_total",
        "rdma_rx_odd_name_total",
        "rdma_rx_vport_rdma_extra_bytes_total",
    } <= names
    # A setting is no counter, an ethtool stat without "vport" is not RDMA's.
    assert "rdma_lifespan_total" not in names
    assert "rdma_rx_packets_phy_total" not in names


def test_per_priority_stats_get_a_priority_label(node: RdmaNode) -> None:
    pf = node.pf(1)
    node.pod_nic(pf, 0, "p", stats={"rx_prio3_discards": 11, "tx_prio5_pause": 2})
    assert series(node, "rdma_rx_discards_total", pod_name="p")["net1/3"] == 11
    assert series(node, "rdma_tx_pause_total", pod_name="p")["net1/5"] == 2
    assert len(series(node, "rdma_rx_pause_total", pod_name="p")) == 8


def test_tos_only_for_root_devices_with_three_labels(node: RdmaNode) -> None:
    node.pf(1, tclass=106)
    node.pf(2, tclass=None)
    node.pod_nic(node.pf(3), 0, "p")
    tos = [s for s in samples(node) if s.name == "rdma_device_tos_total"]
    assert {s.labels["net_dev_name"]: s.value for s in tos} == {
        "ens1f0": 106,
        "ens2f0": 0,  # Spiderpool: 0 when no traffic class is set
        "ens3f0": 106,
    }
    assert all(set(s.labels) == {"node_name", "ifname", "net_dev_name"} for s in tos)


def test_speed_is_exported_in_mbps(node: RdmaNode) -> None:
    pf = node.pf(1)
    node.pod_nic(pf, 0, "p")
    speeds = series(node, "rdma_vport_speed_mbps_total")
    assert speeds == {"ens1f0": 200000, "net1": 100000}


def test_unreadable_netdev_keeps_rdma_counters_and_counts_an_error(
    node: RdmaNode,
) -> None:
    pf = node.pf(1)
    st = node.pod_nic(pf, 0, "p", counters={"out_of_sequence": 1})
    del node.netdevs.stats[(st.netns, "net1")]
    collector = node.collector()
    got = [s for f in collector.collect() for s in f.samples]
    assert any(
        s.name == "rdma_out_of_sequence_total" and s.labels["pod_name"] == "p"
        for s in got
    )
    assert not any(
        s.name.startswith("rdma_rx_vport") and s.labels["pod_name"] == "p" for s in got
    )
    errors = {
        s.labels["source"]: s.value
        for s in got
        if s.name == "railyard_exporter_read_errors_total"
    }
    assert errors == {"netdev": 1, "rdma": 0}


def test_one_netdev_read_per_netns(node: RdmaNode) -> None:
    pf = node.pf(1, numvfs=2)
    netns = node.netns("cni-two-nics")
    node.pod_nic(pf, 0, "two", ifname="net1", netns=netns)
    node.pod_nic(pf, 1, "two", ifname="net2", netns=netns)
    samples(node)
    assert node.netdevs.calls.count(netns) == 1


@pytest.mark.parametrize(
    ("speed", "hi", "mbps"),
    [(10000, 0, 10000), (0xFFFF, 0xFFFF, None), (0, 0, None), (0xD40, 0x3, 200000)],
)
def test_ethtool_speed_halves(speed: int, hi: int, mbps: int | None) -> None:
    assert parse_speed(speed, hi) == mbps
