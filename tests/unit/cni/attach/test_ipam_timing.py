# SPDX-License-Identifier: Apache-2.0
"""When the ADD asks its IPAM for the address, against the kernel steps.

ipamd never looks at the interface, so it is asked while the VF is still
moving (``cni.attach.ipam_ahead``). A delegated IPAM plugin may use the
interface (dhcp runs DHCP on CNI_IFNAME in CNI_NETNS), so it is asked only
once the interface is in the pod, named and up. The fake kernel's journal
shows which steps had run when ``allocate`` was called.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cni.ipam import IpamRequest, IpamResult
from cni.ipam.delegate import DelegateIpam
from cni.ipam.grpc_client import IpamdClient
from tests.unit.cni.attach.node import Node


@pytest.fixture
def node(state_root: Path) -> Node:
    return Node(state_root)


def journal_at_allocate(node: Node) -> list[list[str]]:
    """Wrap the node's IPAM: each allocate records the kernel's journal so far."""
    seen: list[list[str]] = []
    allocate = node.ipam.allocate

    def recording(req: IpamRequest) -> IpamResult:
        seen.append(list(node.kernel.journal))
        return allocate(req)

    node.ipam.allocate = recording  # type: ignore[method-assign]
    return seen


def test_an_ipam_that_may_use_the_interface_is_asked_once_it_is_up_in_the_pod(
    node: Node,
) -> None:
    node.ipam.uses_interface = DelegateIpam.uses_interface  # a delegated dhcp
    seen = journal_at_allocate(node)
    pod, vf = node.pod(), node.roce.vfs[0]
    node.add(node.sriov_conf(vf), pod)
    [before] = seen
    assert "move_renamed" in before and "set_up" in before
    assert "add_address" not in before
    assert node.kernel.link(pod, "net1") is not None


def test_ipamd_is_asked_before_the_vf_moves(node: Node) -> None:
    node.ipam.uses_interface = IpamdClient.uses_interface
    asked = threading.Event()
    allocate = node.ipam.allocate

    def signalling(req: IpamRequest) -> IpamResult:
        try:
            return allocate(req)
        finally:
            asked.set()

    node.ipam.allocate = signalling  # type: ignore[method-assign]
    seen = journal_at_allocate(node)  # the journal is read before the signal
    enter = node.kernel._enter

    def move_once_asked(op: str, *args: object) -> None:
        # The allocation runs on its own thread: the move waits for it to
        # start (bounded), so the journal it saw is deterministic.
        if op == "move_renamed":
            asked.wait(5)
        enter(op, *args)

    node.kernel._enter = move_once_asked  # type: ignore[method-assign]
    pod, vf = node.pod(), node.roce.vfs[0]
    node.add(node.sriov_conf(vf), pod)
    [before] = seen
    assert "get_vf" in before  # the record was saved: the VF is about to change
    assert "move_renamed" not in before and "set_up" not in before
