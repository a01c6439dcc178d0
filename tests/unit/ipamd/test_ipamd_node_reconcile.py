# SPDX-License-Identifier: Apache-2.0
"""A node's account of its attachments (``AllocState.reconcile_node``) and who
may give one (``ipamd.node_identity``)."""

from __future__ import annotations

from ipamd import pool_admin
from ipamd.allocator import AllocateRequest, AllocState
from ipamd.manifest import parse_manifest
from ipamd.node_identity import proven_node
from ipamd.pools import pool_to_spec
from ipamd.store import DeleteAllocation, Snapshot, UpdateAllocation

POOL = """
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: rail1}
spec:
  subnet: 172.16.11.0/24
  ips: [172.16.11.1-172.16.11.20]
"""
GRACE = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def state(clock: Clock) -> AllocState:
    st = AllocState(Snapshot(), clock=clock)
    pools, reserved = parse_manifest(POOL)
    pool_admin.apply_pools(st, pools, reserved)
    return st


def allocate(st: AllocState, cid: str, node: str, **kw: object) -> str:
    request = AllocateRequest(
        network="rail1-net",
        container_id=cid,
        ifname="net1",
        node=node,
        ipv4_pools=("rail1",),
        **kw,  # type: ignore[arg-type]
    )
    leases, _ = st.allocate(request)
    return leases[0].row.ip


def released(st: AllocState, node: str, held: list[str], **kw: object) -> list[str]:
    outcome, _ = st.reconcile_node(
        node,
        [(cid, "net1") for cid in held],
        ["rail1-net"],
        GRACE,
        **kw,  # type: ignore[arg-type]
    )
    return [lease.row.container_id or "" for lease in outcome.released]


def test_an_allocation_of_a_pod_not_on_the_node_goes_after_the_grace_not_before() -> (
    None
):
    clock = Clock()
    st = state(clock)
    allocate(st, "on-a", "node-a")
    allocate(st, "not-on-a", "node-a")
    clock.now += GRACE - 1
    assert released(st, "node-a", ["on-a"]) == []
    assert st.get("not-on-a", "net1")
    clock.now += 1
    assert released(st, "node-a", ["on-a"]) == ["not-on-a"]
    assert not st.get("not-on-a", "net1")
    assert st.get("on-a", "net1")


def test_a_report_touches_only_its_own_node_and_its_networks() -> None:
    clock = Clock()
    st = state(clock)
    allocate(st, "on-b", "node-b")
    st.allocate(
        AllocateRequest(
            network="macvlan-net",  # railyard-ipam: no VF record on the node
            container_id="macvlan-pod",
            ifname="net1",
            node="node-a",
            ipv4_pools=("rail1",),
        )
    )
    clock.now += 10 * GRACE
    assert released(st, "node-a", []) == []
    assert st.get("on-b", "net1") and st.get("macvlan-pod", "net1")


def test_a_node_that_stops_reporting_loses_nothing() -> None:
    clock = Clock()
    st = state(clock)
    allocate(st, "c1", "node-a")
    clock.now += 1000 * GRACE  # no report ever comes: nothing runs
    assert st.get("c1", "net1")
    assert [lease.row.container_id for lease in st.list_rows(node="node-a")] == ["c1"]


def test_a_sticky_address_taken_back_counts_from_when_it_was_taken() -> None:
    clock = Clock()
    st = state(clock)
    pod = {"pod_namespace": "ns", "pod_name": "web-0", "sticky": True}
    first = allocate(st, "c-old", "node-a", **pod)
    st.release("", "c-old", "net1")
    clock.now += 10 * GRACE
    # The restarted pod's ADD got the held address back (created_at is the
    # first one's) and its record is not in this report yet.
    assert allocate(st, "c-new", "node-a", **pod) == first
    assert released(st, "node-a", []) == []
    clock.now += GRACE
    outcome, ops = st.reconcile_node("node-a", [], ["rail1-net"], GRACE)
    assert [lease.row.container_id for lease in outcome.released] == ["c-new"]
    # Released like a DEL's: the address stays held for the sticky pod.
    assert [type(op) for op in ops] == [UpdateAllocation]


def test_a_state_rebuilt_by_a_takeover_waits_a_grace_before_releasing() -> None:
    clock = Clock()
    st = state(clock)
    allocate(st, "c1", "node-a")
    clock.now += 10 * GRACE
    snap = Snapshot(
        pools={name: pool_to_spec(pool) for name, pool in st.pools.items()},
        allocations=list(st.rows.values()),
    )
    rebuilt = AllocState(snap, clock=clock)
    assert released(rebuilt, "node-a", []) == []
    clock.now += GRACE
    assert released(rebuilt, "node-a", []) == ["c1"]


def test_dry_run_answers_and_changes_nothing() -> None:
    clock = Clock()
    st = state(clock)
    allocate(st, "gone", "node-a")
    clock.now += GRACE
    outcome, ops = st.reconcile_node("node-a", [], ["rail1-net"], GRACE, dry_run=True)
    assert [lease.row.container_id for lease in outcome.released] == ["gone"]
    assert ops == [] and st.get("gone", "net1")
    outcome, ops = st.reconcile_node("node-a", [], ["rail1-net"], GRACE)
    assert [type(op) for op in ops] == [DeleteAllocation]


def test_unexplained_but_young_allocations_are_counted() -> None:
    clock = Clock()
    st = state(clock)
    allocate(st, "young", "node-a")
    outcome, _ = st.reconcile_node("node-a", [], ["rail1-net"], GRACE)
    assert (outcome.released, outcome.within_grace) == ([], 1)


def test_node_identity_is_the_certificates_cn_in_either_form() -> None:
    for cn in (b"gpu-7", b"system:node:gpu-7"):
        node, how = proven_node({"x509_common_name": [cn]}, "ipv4:10.0.0.7:5123", "")
        assert node == "gpu-7" and cn.decode() in how


def test_node_identity_on_the_unix_socket_is_ipamds_own_node() -> None:
    assert proven_node({}, "unix:", "gpu-1")[0] == "gpu-1"
    node, why = proven_node({}, "unix:", "")
    assert node == "" and "--node-name" in why


def test_tls_without_a_client_certificate_proves_no_node() -> None:
    node, why = proven_node(
        {"transport_security_type": [b"ssl"]}, "ipv4:1.2.3.4:1", "n"
    )
    assert node == "" and "client certificate" in why
