# SPDX-License-Identifier: Apache-2.0
"""Per-NIC routing tables: deterministic by name, collision-free, explicit wins."""

from __future__ import annotations

from cni.attach.routing import (
    HASH_TABLE_BASE,
    HASH_TABLE_SPAN,
    choose_table,
    plan_routing,
    preferred_table,
)
from cni.ipam import IpamAddress, IpamRoute
from cni.kernel import RouteSpec, RuleSpec


def test_net_n_gets_table_100_plus_n_like_spiderpool() -> None:
    assert [preferred_table(f"net{n}") for n in (1, 2, 8, 17)] == [101, 102, 108, 117]


def test_other_names_hash_stably_into_the_high_range() -> None:
    t = preferred_table("rail0")
    assert t == preferred_table("rail0")
    assert HASH_TABLE_BASE <= t < HASH_TABLE_BASE + HASH_TABLE_SPAN
    assert preferred_table("rail1") != t


def test_table_does_not_depend_on_attach_order() -> None:
    # net2 attached first, then net1: each still gets its own number.
    after_net2 = [RuleSpec("172.16.12.1/32", 102, 900)]
    assert choose_table("net1", after_net2, ["172.16.11.1/32"]) == 101
    assert choose_table("net2", [], ["172.16.12.1/32"]) == 102


def test_a_table_used_by_someone_else_in_the_pod_is_skipped() -> None:
    used = [RuleSpec("10.0.0.5/32", 101, 100), RuleSpec("10.0.0.6/32", 102, 100)]
    assert choose_table("net1", used, ["172.16.11.1/32"]) == 103


def test_a_retried_add_keeps_its_own_table() -> None:
    used = [RuleSpec("172.16.11.1/32", 101, 900)]
    assert choose_table("net1", used, ["172.16.11.1/32"]) == 101


def test_an_explicit_table_wins() -> None:
    assert choose_table("net1", [], [], explicit=4242) == 4242


def test_plan_puts_subnet_pool_and_default_routes_in_the_nic_table() -> None:
    ips = [
        IpamAddress("172.16.11.5/24", "172.16.11.254", "p", 4),
        IpamAddress("fd00:11::5/64", "fd00:11::fe", "p6", 6),
    ]
    plan = plan_routing("net1", ips, [IpamRoute("10.9.0.0/16")], 101, 900, False)
    assert plan.rules == (
        RuleSpec("172.16.11.5/32", 101, 900, 2),
        RuleSpec("fd00:11::5/128", 101, 900, 10),
    )
    dsts = [(r.dst, r.gw, r.table) for r in plan.routes]
    assert dsts == [
        ("172.16.11.0/24", None, 101),
        ("10.9.0.0/16", "172.16.11.254", 101),
        ("0.0.0.0/0", "172.16.11.254", 101),
        ("fd00:11::/64", None, 101),
        ("::/0", "fd00:11::fe", 101),
    ]
    assert plan.main_defaults == ()


def test_pod_default_route_nic_adds_main_defaults() -> None:
    ips = [IpamAddress("172.16.11.5/24", "172.16.11.254", "p", 4)]
    plan = plan_routing("net1", ips, [], 101, 900, True)
    assert plan.main_defaults == (RouteSpec("0.0.0.0/0", "172.16.11.254", "net1", 254),)
