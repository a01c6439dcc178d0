# SPDX-License-Identifier: Apache-2.0
"""How often one ADD or DEL asks the kernel about a link (issue 9).

Each answer is an RTM_NEWLINK that pyroute2 takes ~1.5 ms to decode, and a
warm ADD must not cost more than the Go chain's. The lifecycle carries what a
step already learnt to the next step instead of asking again; these ceilings
keep a new step from silently asking once more. (The real adapter's
requests, with the index lookups of rename, address and route changes, are
counted in tests/integration/sriov/test_sriov_netlink_cost.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.cni.attach.node import Node


@pytest.fixture
def node(state_root: Path) -> Node:
    return Node(state_root)


def lookups_during(node: Node, action: Callable[[], object]) -> int:
    before = node.kernel.calls("get") + node.kernel.calls("list")
    action()
    return node.kernel.calls("get") + node.kernel.calls("list") - before


def test_a_one_nic_add_asks_for_a_link_at_most_five_times(node: Node) -> None:
    # The VF and the PF in the host; the pod's ifname and the VF's host name
    # in the pod (both must be free); the renamed VF, for its altnames.
    pod, conf = node.pod(), node.sriov_conf()
    assert lookups_during(node, lambda: node.add(conf, pod)) <= 5


def test_an_add_that_sets_the_mtu_reads_the_link_back_once_more(node: Node) -> None:
    pod, conf = node.pod(), node.sriov_conf(mtu=9000)
    assert lookups_during(node, lambda: node.add(conf, pod)) <= 6
    link = node.kernel.link(pod, "net1")
    assert link is not None and link.mtu == 9000


def test_a_one_nic_del_asks_for_a_link_at_most_four_times(node: Node) -> None:
    # The pod side; the host name free in the pod; the renamed VF, for its
    # altnames; the VF back home, for its MAC and MTU.
    pod, conf = node.pod(), node.sriov_conf()
    node.add(conf, pod)
    assert lookups_during(node, lambda: node.delete(conf, pod)) <= 4
    assert node.kernel.link(None, node.roce.vfs[0].netdev) is not None


def test_an_add_reports_the_link_as_the_pod_shows_it(node: Node) -> None:
    pod, conf = node.pod(), node.sriov_conf()
    res = node.add(conf, pod).to_json("1.1.0")
    link = node.kernel.link(pod, "net1")
    assert link is not None and link.up
    shown = link.info()
    assert (res["interfaces"][0]["mac"], res["interfaces"][0]["mtu"]) == (
        shown.mac,
        shown.mtu,
    )
