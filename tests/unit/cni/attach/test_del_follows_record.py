# SPDX-License-Identifier: Apache-2.0
"""DEL follows what ADD recorded, not what DEL is told (fake kernel, no root).

The rows of the "DEL follows the record" table: a DEL whose CNI_NETNS is
another pod's, a missing path or empty; a DEL whose netconf lost its ipam; an
ib-sriov ADD given an Ethernet VF. Each ends with the VF home, the address
freed exactly once, after the VF left the pod, and no record.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from cni.errors import CHECK_FAILED, DEVICE_ERROR, CniError
from cni.ipam import IpamRequest
from tests.unit.cni.attach.node import Node, Snapshot, Vf

ADDRESS = "172.16.11.1/24"


@pytest.fixture
def node(state_root: Path) -> Node:
    return Node(state_root)


def watch_release_order(node: Node, vf: Vf) -> list[Snapshot]:
    """Where the VF was each time an address was released."""
    seen: list[Snapshot] = []
    release = node.ipam.release

    def spying(network: str, container_id: str, ifname: str) -> None:
        seen.append(node.snapshot(vf))
        release(network, container_id, ifname)

    node.ipam.release = spying  # type: ignore[method-assign]
    return seen


def assert_done(node: Node, vf: Vf, was: Snapshot, cid: str = "c1") -> None:
    assert node.snapshot(vf) == was
    assert node.ipam.times_freed(ADDRESS) == 1
    assert node.ipam.addresses_of(cid, "net1") == []
    assert node.records_of(cid, vf.pci) == []


@pytest.mark.parametrize(
    "del_netns",
    ["other-pod", "/var/run/netns/gone", ""],
    ids=["another-live-pod", "missing-path", "empty"],
)
def test_del_takes_the_vf_back_from_the_recorded_netns(
    node: Node, del_netns: str
) -> None:
    pod, other = node.pod(), node.pod()
    vf, neighbour = node.roce.vfs
    was = node.snapshot(vf)
    conf = node.sriov_conf(trust="on", mtu=4000)
    node.add(conf, pod)
    node.add(node.sriov_conf(vf=neighbour), other, container_id="c2")
    releases = watch_release_order(node, vf)
    node.delete(conf, other if del_netns == "other-pod" else del_netns)
    assert_done(node, vf, was)
    assert [s.netns for s in releases] == [None]  # released once the VF was home
    # The other pod's attachment is untouched.
    assert node.snapshot(neighbour).netns == other
    assert node.ipam.addresses_of("c2", "net1") == ["172.16.11.2/24", "fd00:1::2/64"]


def test_del_without_ipam_in_the_netconf_releases_through_the_recorded_ipam(
    node: Node,
) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    conf = node.sriov_conf()
    node.add(conf, pod)
    edited = {k: v for k, v in conf.items() if k != "ipam"}
    node.delete(edited, pod)
    assert_done(node, vf, was)
    node.delete(edited, pod)  # a repeated DEL finds nothing left to do
    assert node.ipam.times_freed(ADDRESS) == 1


def test_del_without_a_record_or_ipam_still_asks_the_ipam_to_release(
    node: Node,
) -> None:
    # An allocation whose ADD died before its record was written.
    node.ipam.allocate(IpamRequest("rail1", "c9", "net1", ipv4_pools=("rail1-v4",)))
    conf = {k: v for k, v in node.sriov_conf().items() if k != "ipam"}
    node.delete(conf, node.pod(), container_id="c9")
    assert node.ipam.held == {}
    assert node.ipam.times_freed(ADDRESS) == 1


def test_an_address_stays_held_while_its_vf_may_still_carry_it(node: Node) -> None:
    """The VF is not where the record says (renamed inside the live pod):
    DEL cannot take it back, so nothing is released until it is home."""
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    conf = node.sriov_conf()
    node.add(conf, pod)
    node.kernel.links.set_down("net1", pod)
    node.kernel.links.rename("net1", "renamed", pod)
    node.delete(conf, pod)
    assert node.ipam.freed == [] and node.snapshot(vf).netns == pod
    assert node.records() != []
    node.kernel.delete_netns(pod)  # the pod goes; its VF comes home
    node.gc(conf, valid=[])
    assert_done(node, vf, was)


def test_ib_sriov_refuses_an_ethernet_vf_before_any_change(node: Node) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    with pytest.raises(CniError) as info:
        node.add(node.ib_conf(vf=vf), pod)
    assert info.value.code == DEVICE_ERROR
    assert (
        info.value.msg
        == f"VF {vf.pci} is an ethernet VF; ib-sriov needs an infiniband VF"
    )
    assert "link type ethernet" in info.value.details
    assert not [op for op in node.kernel.journal if op.startswith("set_vf_")]
    assert node.snapshot(vf) == was and node.records() == [] and node.ipam.held == {}
    node.delete(node.ib_conf(vf=vf), pod)  # and DEL has nothing to fail on


def test_sriov_refuses_an_ipoib_vf_when_asked_for_ethernet_settings(
    node: Node,
) -> None:
    pod, vf = node.pod(), node.ib.vfs[0]
    was = node.snapshot(vf)
    conf = node.sriov_conf(vf=vf, vlan=10, spoofchk="off")
    with pytest.raises(CniError) as info:
        node.add(conf, pod)
    assert "is an infiniband VF; sriov needs an ethernet VF" in info.value.msg
    assert "vlan, spoofchk can only be set on an Ethernet VF" in info.value.details
    assert node.snapshot(vf) == was and node.records() == []


@pytest.mark.parametrize(
    ("op", "conf"),
    [
        ("set_vf_trust", lambda n: n.sriov_conf(trust="on")),
        ("set_vf_node_guid", lambda n: n.ib_conf()),
    ],
)
def test_a_setting_the_device_refuses_leaves_no_record_del_cannot_clear(
    node: Node, op: str, conf: Any
) -> None:
    """The step fails with EOPNOTSUPP and so would its undo: the rollback
    knows nothing was changed, and no record is left behind."""
    netconf = conf(node)
    vf = node.roce.vfs[0] if netconf["type"] == "sriov" else node.ib.vfs[0]
    pod = node.pod()
    was = node.snapshot(vf)
    node.kernel.fail(op, errno.EOPNOTSUPP, times=None)
    with pytest.raises(CniError):
        node.add(netconf, pod)
    assert node.snapshot(vf) == was
    assert node.records() == [] and node.ipam.held == {}
    node.delete(netconf, pod)


def test_check_names_a_vf_that_is_not_in_the_recorded_netns(node: Node) -> None:
    pod, other = node.pod(), node.pod()
    conf = node.sriov_conf()
    result = node.add(conf, pod)
    conf = {**conf, "prevResult": result.to_json()}
    with pytest.raises(CniError) as info:
        node.check(conf, other)
    assert info.value.code == CHECK_FAILED
    assert info.value.msg == "net1 was attached in another netns"
    assert pod in info.value.details


def test_check_names_an_address_missing_from_the_vf(node: Node) -> None:
    pod = node.pod()
    conf = node.sriov_conf()
    node.add(conf, pod)
    node.kernel.links.del_address("net1", "fd00:1::1/64", pod)
    prev = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "net1", "sandbox": pod}],
        "ips": [{"address": ADDRESS, "interface": 0}],
    }
    with pytest.raises(CniError) as info:
        node.check({**conf, "prevResult": prev}, pod)
    assert (info.value.code, info.value.msg) == (
        CHECK_FAILED,
        "addresses missing on net1",
    )
    assert info.value.details == "fd00:1::1/64"


def test_gc_with_a_netconf_without_ipam_releases_through_the_recorded_ipam(
    node: Node,
) -> None:
    pod, vf = node.pod(), node.roce.vfs[0]
    was = node.snapshot(vf)
    conf = node.sriov_conf()
    node.add(conf, pod)
    node.gc({k: v for k, v in conf.items() if k != "ipam"}, valid=[])
    assert_done(node, vf, was)


@pytest.mark.parametrize("del_netns", ["other-pod", "/var/run/netns/gone", ""])
def test_rdma_del_brings_the_device_home_from_the_recorded_netns(
    node: Node, del_netns: str
) -> None:
    pod, other, vf = node.pod(), node.pod(), node.roce.vfs[0]
    node.add(node.sriov_conf(), pod)
    node.add(node.rdma_conf(), pod)
    assert node.kernel.rdma_netns(vf.rdma) == pod
    node.delete(node.rdma_conf(), other if del_netns == "other-pod" else del_netns)
    assert node.kernel.rdma_netns(vf.rdma) is None
    assert [r for r in node.records() if r.startswith("rdma/")] == []


def test_del_never_takes_another_pods_vf_named_like_the_recorded_one(
    node: Node,
) -> None:
    """The recorded netns is gone and CNI_NETNS is another live pod whose VF
    is also ``net1``: only the recorded VF's identity (ifindex, pod MAC)
    counts, so that pod keeps its VF and address."""
    pod, other = node.pod(), node.pod()
    vf, neighbour = node.roce.vfs
    was = node.snapshot(vf)
    conf = node.sriov_conf(mtu=4000)
    node.add(conf, pod)
    node.add(node.sriov_conf(vf=neighbour), other, container_id="c2")
    node.kernel.delete_netns(pod)  # its VF comes home as net1
    node.delete(conf, other)
    assert_done(node, vf, was)
    assert node.snapshot(neighbour).netns == other
    assert node.snapshot(neighbour).name == "net1"
    assert node.ipam.addresses_of("c2", "net1") == ["172.16.11.2/24", "fd00:1::2/64"]
