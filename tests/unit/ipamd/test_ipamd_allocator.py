# SPDX-License-Identifier: Apache-2.0
"""Allocation policy (AllocState) and the free-address index."""

from __future__ import annotations

import ipaddress

import pytest

from ipamd import pool_admin
from ipamd.allocator import AllocateRequest, AllocState
from ipamd.errors import Conflict, Exhausted, InvalidRequest, NotFound
from ipamd.freeindex import FreeIndex
from ipamd.manifest import parse_manifest
from ipamd.store import DeleteAllocation, InsertAllocation, Snapshot, UpdateAllocation


def ip(text: str) -> int:
    return int(ipaddress.ip_address(text))


def state_with(manifest: str) -> AllocState:
    st = AllocState(Snapshot(), clock=lambda: 1000.0)
    pools, reserved = parse_manifest(manifest)
    pool_admin.apply_pools(st, pools, reserved)
    return st


def pool_doc(name: str, subnet: str, ips: str, **extra: object) -> str:
    lines = [
        "---",
        "apiVersion: spiderpool.spidernet.io/v2beta1",
        "kind: SpiderIPPool",
        f"metadata: {{name: {name}}}",
        "spec:",
        f"  subnet: {subnet}",
        f"  ips: [{ips}]",
    ]
    lines += [f"  {k}: {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


RAILS = pool_doc(
    "rail1", "172.16.11.0/24", "172.16.11.1-172.16.11.4", gateway="172.16.11.254"
) + pool_doc("rail1-v6", "fd00:11::/64", "fd00:11::1-fd00:11::ffff:ffff:ffff:ffff")


def req(cid: str, ifname: str = "net1", **kw: object) -> AllocateRequest:
    base: dict[str, object] = {"network": "net", "ipv4_pools": ("rail1",)}
    base.update(kw)
    return AllocateRequest(container_id=cid, ifname=ifname, **base)  # type: ignore[arg-type]


def addresses(leases) -> list[str]:
    return [lease.address for lease in leases]


def test_free_index_hands_out_the_lowest_free_address_first() -> None:
    index = FreeIndex([(10, 12), (20, 21)], used=[11])
    assert [index.take() for _ in range(4)] == [10, 12, 20, 21]
    assert index.take() is None
    index.release(12)
    index.release(10)
    assert index.take() == 10
    assert index.free_count == 1


def test_free_index_skips_addresses_taken_out_of_order() -> None:
    index = FreeIndex([(1, 5)])
    assert index.take_specific(2)
    assert not index.take_specific(2)
    assert [index.take() for _ in range(4)] == [1, 3, 4, 5]
    index.release(2)
    assert index.take() == 2


def test_free_index_of_an_ipv6_slash_64_costs_two_integers() -> None:
    lo = ip("fd00::1")
    hi = ip("fd00::ffff:ffff:ffff:ffff")
    index = FreeIndex([(lo, hi)])
    assert index.total == 2**64 - 1
    assert index.take() == lo
    assert index.free_count == 2**64 - 2


def test_allocation_is_first_free_in_range_order_with_the_pool_prefix() -> None:
    st = state_with(RAILS)
    leases, ops = st.allocate(req("c1"))
    assert addresses(leases) == ["172.16.11.1/24"]
    assert str(leases[0].pool.gateway) == "172.16.11.254"
    assert [type(o) for o in ops] == [InsertAllocation]
    assert addresses(st.allocate(req("c2"))[0]) == ["172.16.11.2/24"]


def test_allocate_is_idempotent_per_container_and_ifname() -> None:
    st = state_with(RAILS)
    first, _ = st.allocate(req("c1"))
    again, ops = st.allocate(req("c1"))
    assert addresses(again) == addresses(first)
    assert ops == []
    assert len(st.rows) == 1


def test_dual_stack_allocates_one_address_per_family_in_one_call() -> None:
    st = state_with(RAILS)
    leases, ops = st.allocate(req("c1", ipv6_pools=("rail1-v6",)))
    assert addresses(leases) == ["172.16.11.1/24", "fd00:11::1/64"]
    assert len(ops) == 2


def test_dual_stack_failure_of_one_family_changes_nothing() -> None:
    st = state_with(RAILS + pool_doc("tiny6", "fd00:12::/64", "fd00:12::1"))
    st.allocate(req("c0", ipv4_pools=(), ipv6_pools=("tiny6",)))
    with pytest.raises(Exhausted):
        st.allocate(req("c1", ipv6_pools=("tiny6",)))
    assert pool_admin.usage(st, "rail1").allocated == 0
    assert addresses(st.allocate(req("c2"))[0]) == ["172.16.11.1/24"]


def test_exhausted_error_names_every_pool_tried() -> None:
    st = state_with(RAILS + pool_doc("rail2", "172.16.12.0/24", "172.16.12.1"))
    for n in range(5):
        st.allocate(req(f"c{n}", ipv4_pools=("rail1", "rail2")))
    with pytest.raises(Exhausted) as err:
        st.allocate(req("cx", ipv4_pools=("rail1", "rail2")))
    assert "rail1: exhausted (4/4" in str(err.value)
    assert "rail2: exhausted (1/1" in str(err.value)


def test_pools_are_tried_in_the_order_given() -> None:
    st = state_with(
        RAILS + pool_doc("rail2", "172.16.12.0/24", "172.16.12.1-172.16.12.9")
    )
    leases, _ = st.allocate(req("c1", ipv4_pools=("rail2", "rail1")))
    assert leases[0].pool.name == "rail2"


def test_affinity_filters_skip_pools_for_other_nodes_namespaces_networks() -> None:
    st = state_with(
        pool_doc("node-a", "10.1.0.0/24", "10.1.0.1-10.1.0.9", nodeName="[a]")
        + pool_doc("ns-x", "10.2.0.0/24", "10.2.0.1-10.2.0.9", namespaceName="[x]")
        + pool_doc(
            "nad",
            "10.3.0.0/24",
            "10.3.0.1-10.3.0.9",
            multusName="[kube-system/rail-nad]",
        )
        + pool_doc("disabled", "10.4.0.0/24", "10.4.0.1-10.4.0.9", disable="true")
        + pool_doc("any", "10.5.0.0/24", "10.5.0.1-10.5.0.9")
    )
    order = ("disabled", "node-a", "ns-x", "nad", "any")
    leases, _ = st.allocate(
        req("c1", ipv4_pools=order, node="b", pod_namespace="y", network="other")
    )
    assert leases[0].pool.name == "any"
    leases, _ = st.allocate(
        req("c2", ipv4_pools=order, node="b", pod_namespace="y", network="rail-nad")
    )
    assert leases[0].pool.name == "nad"
    leases, _ = st.allocate(req("c3", ipv4_pools=order, node="a"))
    assert leases[0].pool.name == "node-a"
    with pytest.raises(Exhausted, match="disabled: disabled.*node-a: nodeName"):
        st.allocate(req("c4", ipv4_pools=order[:2], node="b"))


def test_default_pools_are_the_fallback_when_no_pool_is_named() -> None:
    st = state_with(
        RAILS + pool_doc("dflt", "10.9.0.0/24", "10.9.0.1-10.9.0.9", default="true")
    )
    leases, _ = st.allocate(req("c1", ipv4_pools=()))
    assert leases[0].pool.name == "dflt"


def test_no_pool_and_no_default_pool_is_an_invalid_request() -> None:
    st = state_with(RAILS)
    with pytest.raises(InvalidRequest, match="no default IPPool"):
        st.allocate(req("c1", ipv4_pools=()))


def test_unknown_pool_is_not_found_and_wrong_family_is_invalid() -> None:
    st = state_with(RAILS)
    with pytest.raises(NotFound, match="IPPool nope not found"):
        st.allocate(req("c1", ipv4_pools=("nope",)))
    with pytest.raises(InvalidRequest, match="is an IPv6 pool"):
        st.allocate(req("c1", ipv4_pools=("rail1-v6",)))


def test_requested_ip_is_honoured_and_refused_when_taken() -> None:
    st = state_with(RAILS)
    leases, _ = st.allocate(req("c1", requested_ips=("172.16.11.3/24",)))
    assert addresses(leases) == ["172.16.11.3/24"]
    with pytest.raises(Conflict, match="in use by container c1"):
        st.allocate(req("c2", requested_ips=("172.16.11.3",)))
    with pytest.raises(InvalidRequest, match="in none of the IPPools"):
        st.allocate(req("c3", requested_ips=("172.16.11.100",)))
    # The out-of-order address is skipped by first-free allocation.
    got = [addresses(st.allocate(req(f"d{n}"))[0])[0] for n in range(3)]
    assert got == ["172.16.11.1/24", "172.16.11.2/24", "172.16.11.4/24"]


def test_reserved_ips_are_never_handed_out() -> None:
    st = state_with(
        RAILS
        + "---\napiVersion: spiderpool.spidernet.io/v2beta1\nkind: SpiderReservedIP\n"
        "metadata: {name: r}\nspec: {ips: [172.16.11.1-172.16.11.2]}\n"
    )
    got = [addresses(st.allocate(req(f"c{n}"))[0])[0] for n in range(2)]
    assert got == ["172.16.11.3/24", "172.16.11.4/24"]
    with pytest.raises(Exhausted):
        st.allocate(req("c9"))
    assert pool_admin.usage(st, "rail1").total == 2


def test_release_frees_the_address_for_the_next_allocation() -> None:
    st = state_with(RAILS)
    st.allocate(req("c1"))
    st.allocate(req("c2"))
    rows, ops = st.release("net", "c1", "net1")
    assert [r.ip for r in rows] == ["172.16.11.1"]
    assert [type(o) for o in ops] == [DeleteAllocation]
    assert addresses(st.allocate(req("c3"))[0]) == ["172.16.11.1/24"]
    assert st.release("net", "c1", "net1") == ([], [])


def test_release_of_another_network_leaves_the_allocation() -> None:
    st = state_with(RAILS)
    st.allocate(req("c1"))
    assert st.release("other-net", "c1", "net1") == ([], [])
    assert len(st.get("c1", "net1")) == 1


def test_gc_releases_only_attachments_missing_from_the_valid_list() -> None:
    st = state_with(RAILS)
    st.allocate(req("keep"))
    st.allocate(req("gone"))
    st.allocate(req("other", network="net2"))
    rows, _ = st.gc("net", [("keep", "net1")])
    assert [r.container_id for r in rows] == ["gone"]
    rows, _ = st.gc("", [("keep", "net1")])
    assert [r.container_id for r in rows] == ["other"]


def test_sticky_pod_gets_its_address_back_after_a_restart() -> None:
    st = state_with(RAILS)
    pod = {"pod_namespace": "ns", "pod_name": "web-0", "sticky": True}
    first, _ = st.allocate(req("c1", **pod))
    st.allocate(req("other"))
    rows, ops = st.release("net", "c1", "net1")
    assert [type(o) for o in ops] == [UpdateAllocation]  # held, not freed
    assert st.get("c1", "net1") == []
    # The held address is not handed to anyone else.
    assert addresses(st.allocate(req("x"))[0]) == ["172.16.11.3/24"]
    again, ops = st.allocate(req("c2", **pod))
    assert addresses(again) == addresses(first)
    assert [type(o) for o in ops] == [UpdateAllocation]
    assert again[0].row.container_id == "c2"


def test_admin_release_frees_a_held_sticky_address() -> None:
    st = state_with(RAILS)
    st.allocate(req("c1", pod_namespace="ns", pod_name="web-0", sticky=True))
    st.release("net", "c1", "net1")
    rows, ops = st.release_admin("", "", "rail1", "172.16.11.1")
    assert [type(o) for o in ops] == [DeleteAllocation]
    assert pool_admin.usage(st, "rail1").allocated == 0


def test_pool_update_cannot_remove_an_address_in_use() -> None:
    st = state_with(RAILS)
    st.allocate(req("c1"))
    pools, _ = parse_manifest(
        pool_doc(
            "rail1",
            "172.16.11.0/24",
            "172.16.11.2-172.16.11.4",
            gateway="172.16.11.254",
        )
    )
    with pytest.raises(Conflict, match="cannot remove IP 172.16.11.1"):
        pool_admin.apply_pools(st, pools, [])
    assert st.pools["rail1"].ips_text() == ["172.16.11.1-172.16.11.4"]


def test_pool_update_grows_the_pool_and_subnet_is_immutable() -> None:
    st = state_with(RAILS)
    for n in range(4):
        st.allocate(req(f"c{n}"))
    pools, _ = parse_manifest(
        pool_doc(
            "rail1",
            "172.16.11.0/24",
            "172.16.11.1-172.16.11.5",
            gateway="172.16.11.254",
        )
    )
    result, ops = pool_admin.apply_pools(st, pools, [])
    assert result.configured == ["SpiderIPPool/rail1"] and ops
    assert addresses(st.allocate(req("c9"))[0]) == ["172.16.11.5/24"]
    moved, _ = parse_manifest(pool_doc("rail1", "172.16.0.0/16", "172.16.11.1"))
    with pytest.raises(ValueError, match="immutable"):
        pool_admin.apply_pools(st, moved, [])


def test_reapplying_the_same_manifest_reports_unchanged() -> None:
    st = state_with(RAILS)
    pools, reserved = parse_manifest(RAILS)
    result, ops = pool_admin.apply_pools(st, pools, reserved)
    assert result.unchanged == ["SpiderIPPool/rail1", "SpiderIPPool/rail1-v6"]
    assert ops == []


def test_deleting_a_pool_with_allocations_is_refused() -> None:
    st = state_with(RAILS)
    st.allocate(req("c1"))
    with pytest.raises(Conflict, match="still has 1 allocated IPs"):
        pool_admin.delete_pool(st, "rail1")
    st.release("", "c1", "net1")
    assert pool_admin.delete_pool(st, "rail1")
    assert "rail1" not in st.pools


def test_state_rebuilt_from_a_snapshot_continues_where_it_was() -> None:
    st = state_with(RAILS)
    for n in range(3):
        st.allocate(req(f"c{n}"))
    st.release("", "c1", "net1")
    snap = Snapshot(
        pools={
            "rail1": {
                "subnet": "172.16.11.0/24",
                "ips": ["172.16.11.1-172.16.11.4"],
                "gateway": "172.16.11.254",
            }
        },
        allocations=[r for r in st.rows.values()],
    )
    again = AllocState(snap)
    assert addresses(again.allocate(req("new"))[0]) == ["172.16.11.2/24"]
    assert addresses(again.get("c2", "net1")) == ["172.16.11.3/24"]


def test_sticky_pod_does_not_get_back_an_address_reserved_meanwhile() -> None:
    st = state_with(RAILS)
    pod = {"pod_namespace": "ns", "pod_name": "web-0", "sticky": True}
    st.allocate(req("c1", **pod))
    st.release("net", "c1", "net1")
    _, reserved = parse_manifest(
        "apiVersion: spiderpool.spidernet.io/v2beta1\nkind: SpiderReservedIP\n"
        "metadata: {name: r}\nspec: {ips: [172.16.11.1]}\n"
    )
    pool_admin.apply_pools(st, [], reserved)
    leases, ops = st.allocate(req("c2", **pod))
    assert addresses(leases) == ["172.16.11.2/24"]
    assert [type(o) for o in ops] == [DeleteAllocation, InsertAllocation]
    assert pool_admin.usage(st, "rail1").allocated == 1
