# SPDX-License-Identifier: Apache-2.0
"""Cluster CIDRs via eth0 and the podDefaultRouteNIC check, on the fake kernel."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cni.attach.routing import (
    MAIN_TABLE,
    RoutingPlan,
    plan_routing,
    require_default_route_nic,
    with_cluster_routes,
)
from cni.errors import INVALID_CONFIG, CniError
from cni.ipam import IpamAddress
from cni.kernel import RouteSpec, RuleSpec
from tests.doubles.fake_kernel import FakeKernel

POD = "/var/run/netns/pod"
CALICO_DEFAULT = RouteSpec(
    dst="0.0.0.0/0", gw="169.254.1.1", dev="eth0", onlink=True, protocol=4
)


def pod_with_eth0(default: RouteSpec | None = CALICO_DEFAULT) -> FakeKernel:
    k = FakeKernel()
    k.add_netns(POD)
    k.add_link("eth0", POD, up=True)
    k.links.add_address("eth0", "10.244.1.5/32", POD)
    k.add_link("net2", POD, up=True)
    if default is not None:
        k.links.add_route(default, POD)
    return k


def net2_plan() -> RoutingPlan:
    ip = IpamAddress("172.16.12.1/24", "172.16.12.254")
    return plan_routing("net2", [ip], [], 102, 900, default_route_here=False)


def test_cluster_cidrs_go_via_eth0s_gateway_with_its_onlink_flag() -> None:
    k = pod_with_eth0()
    plan = with_cluster_routes(k.links, POD, net2_plan(), ("10.96.0.0/12",), False)
    (added,) = [r for r in plan.routes if r.dst == "10.96.0.0/12"]
    assert (added.gw, added.dev, added.table, added.onlink, added.protocol) == (
        "169.254.1.1", "eth0", 102, True, 4
    )  # fmt: skip
    assert not [r for r in plan.routes if r.table == MAIN_TABLE]


def test_when_the_nic_takes_the_default_they_go_into_main_too() -> None:
    k = pod_with_eth0()
    plan = with_cluster_routes(k.links, POD, net2_plan(), ("10.96.0.0/12",), True)
    tables = sorted(r.table for r in plan.routes if r.dst == "10.96.0.0/12")
    assert tables == [102, MAIN_TABLE]


def test_eth0s_default_is_found_in_its_own_table_after_another_rail_took_main() -> None:
    k = pod_with_eth0(default=None)
    k.links.add_route(replace(CALICO_DEFAULT, table=5000), POD)
    k.links.add_rule(RuleSpec("10.244.1.5/32", 5000, 900), POD)
    plan = with_cluster_routes(k.links, POD, net2_plan(), ("10.96.0.0/12",), False)
    assert [r.gw for r in plan.routes if r.dst == "10.96.0.0/12"] == ["169.254.1.1"]


def test_without_an_eth0_default_nothing_is_added() -> None:
    k = pod_with_eth0(default=None)
    plan = net2_plan()
    assert with_cluster_routes(k.links, POD, plan, ("10.96.0.0/12",), False) == plan


def test_a_default_route_nic_not_in_the_pod_is_refused_naming_the_pods_nics() -> None:
    k = pod_with_eth0()
    require_default_route_nic(k.links, POD, "net2", "net2")  # this NIC
    require_default_route_nic(k.links, POD, "net3", "net2")  # attached before
    require_default_route_nic(k.links, POD, "net3", "")  # not asked
    with pytest.raises(CniError) as err:
        require_default_route_nic(k.links, POD, "net3", "net9")
    assert err.value.code == INVALID_CONFIG
    assert err.value.msg == "podDefaultRouteNIC net9 is not in the pod"
    assert "the pod has eth0, net2" in err.value.details
