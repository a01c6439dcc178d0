# SPDX-License-Identifier: Apache-2.0
"""Named lifecycle paths on the fake kernel: what ADD configures, detection
failures, a pod netns that dies before DEL, an unknown CNI_NETNS, GC."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from cni.errors import GATEWAY_UNREACHABLE, INVALID_CONFIG, IP_CONFLICT, CniError
from cni.kernel import RuleSpec
from tests.unit.cni.attach.node import Node


@pytest.fixture
def node(state_root: Path) -> Node:
    return Node(state_root)


def test_add_configures_the_vf_in_the_pod_and_the_pf_entry(node: Node) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    node.add(node.sriov_conf(mtu=9000, vlan=7, trust="on"), pod)
    link = node.kernel.link(pod, "net1")
    assert link is not None and link.up and link.mtu == 9000
    assert link.addresses == ["172.16.11.1/24", "fd00:1::1/64"]
    assert node.kernel.link(None, vf.netdev) is None
    entry = node.kernel.vf_info(vf.pf_pci, vf.index)
    assert (entry.vlan, entry.trust) == (7, True)
    assert RuleSpec("172.16.11.1/32", 101, 900, 2) in node.kernel.rules_in(pod)
    assert {r.dst for r in node.kernel.routes_in(pod, 101)} >= {"0.0.0.0/0", "::/0"}


def test_an_mtu_above_the_pf_is_refused_before_any_change(node: Node) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    with pytest.raises(CniError) as info:
        node.add(node.sriov_conf(mtu=9100), pod)
    assert info.value.code == INVALID_CONFIG
    assert "above the MTU of PF ens1f0 (9000)" in info.value.msg
    assert node.snapshot(vf) == was and node.records() == []


def test_an_address_answered_by_another_host_rolls_back(node: Node) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    node.kernel.wire["172.16.11.1"] = "02:de:ad:be:ef:01"
    with pytest.raises(CniError) as info:
        node.add(node.sriov_conf(trust="on"), pod)
    assert info.value.code == IP_CONFLICT
    assert (
        info.value.msg
        == "ip conflict: 172.16.11.1 is already used by 02:de:ad:be:ef:01"
    )
    assert node.snapshot(vf) == was
    assert node.ipam.held == {} and node.ipam.times_freed("172.16.11.1/24") == 1
    assert node.records() == []


def test_a_silent_gateway_rolls_back(node: Node) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    del node.kernel.wire[node.roce.gateway_v4]
    with pytest.raises(CniError) as info:
        node.add(node.sriov_conf(), pod)
    assert info.value.code == GATEWAY_UNREACHABLE
    assert node.snapshot(vf) == was and node.ipam.held == {}


def test_sysctl_and_announce_failures_never_fail_the_add(node: Node) -> None:
    pod = node.pod()
    node.kernel.fail("set_sysctl", errno.EACCES, times=None)
    node.kernel.fail("announce", errno.ENETDOWN)
    node.add(node.sriov_conf(), pod)
    assert node.kernel.link(pod, "net1") is not None


def test_del_after_the_pod_netns_died_restores_the_vf_from_its_pod_name(
    node: Node,
) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    conf = node.sriov_conf(mtu=4000, mac="02:aa:00:00:00:01", trust="on")
    node.add(conf, pod)
    node.kernel.delete_netns(pod)
    assert node.kernel.link(None, "net1") is not None  # home, under the pod name
    node.delete(conf, pod)
    assert node.snapshot(vf) == was
    assert node.ipam.times_freed("172.16.11.1/24") == 1 and node.records() == []


def test_gc_restores_and_releases_an_attachment_the_runtime_forgot(
    node: Node,
) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    conf = node.sriov_conf(trust="on")
    node.add(conf, pod)
    node.gc(conf, valid=[])
    assert node.snapshot(vf) == was
    assert node.ipam.times_freed("172.16.11.1/24") == 1 and node.records() == []


def test_a_retried_add_of_a_held_vf_is_refused_for_another_live_pod(
    node: Node,
) -> None:
    first, second = node.pod(), node.pod()
    node.add(node.sriov_conf(), first)
    with pytest.raises(CniError, match="already allocated"):
        node.add(node.sriov_conf(), second, container_id="c2")
    assert node.snapshot(node.roce.vfs[0]).netns == first
    assert node.ipam.addresses_of("c2", "net1") == []
