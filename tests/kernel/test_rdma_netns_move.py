# SPDX-License-Identifier: Apache-2.0
"""NetlinkRdmaOps.move out of a pod netns: done from inside it, with a host fd.

In exclusive mode the kernel only finds (and only moves) a device from inside
the netns it is in, so moving it back must open the NETLINK_RDMA socket and
send from inside the pod netns, with NET_NS_FD naming the host netns. A real
netns is created; the "kernel" is the scripted one (no RDMA here), which
records where the adapter was when it opened each socket and what the fd in
the move request pointed at.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from cni.kernel import NetnsNotFound
from cni.kernel.rdma import NetlinkRdmaOps
from tests.unit.cni.rdma.fake_kernel import FakeKernel

pytestmark = pytest.mark.kernel


def ns_id(path: str) -> str:
    return f"net:[{os.stat(path).st_ino}]"


def test_move_back_runs_inside_the_pod_netns_and_targets_the_host(
    make_netns,
) -> None:
    pod = make_netns("ri")
    host = os.readlink("/proc/thread-self/ns/net")
    kernel = FakeKernel(mode=0, devices={"mlx5_7": 7})
    NetlinkRdmaOps(kernel.factory()).move("mlx5_7", None, netns=pod)
    # Both the dump and the move were sent from inside the pod netns ...
    assert kernel.opened_in == [ns_id(pod), ns_id(pod)]
    # ... and the move named the host netns by fd.
    assert kernel.ns_fd_targets == [host]
    assert os.readlink("/proc/thread-self/ns/net") == host  # and we came back


def test_move_in_runs_in_the_host_and_targets_the_pod(make_netns) -> None:
    pod = make_netns("ri")
    host = os.readlink("/proc/thread-self/ns/net")
    kernel = FakeKernel(mode=0, devices={"mlx5_7": 7})
    NetlinkRdmaOps(kernel.factory()).move("mlx5_7", pod)
    assert kernel.opened_in == [host, host]
    assert kernel.ns_fd_targets == [ns_id(pod)]


def test_move_back_from_a_deleted_netns_is_netns_not_found(make_netns) -> None:
    pod = make_netns("ri")
    subprocess.run(["ip", "netns", "del", os.path.basename(pod)], check=True)
    kernel = FakeKernel(mode=0, devices={"mlx5_7": 7})
    with pytest.raises(NetnsNotFound):
        NetlinkRdmaOps(kernel.factory()).move("mlx5_7", None, netns=pod)
    assert kernel.requests == []
    assert not os.path.exists(pod)  # never re-created by opening it
