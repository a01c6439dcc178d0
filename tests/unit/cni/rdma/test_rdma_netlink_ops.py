# SPDX-License-Identifier: Apache-2.0
"""NetlinkRdmaOps talking to a scripted "kernel" on the other end of a socket.

The socket handed to pyroute2 is one end of an in-process AF_UNIX datagram
pair; a thread on the other end answers each request the way nldev.c does
(replies built from the uapi numbers, see test_rdma_nldev_messages.py). This
runs the adapter's real request path (sequence numbers, dump termination,
error translation) without RDMA hardware.
"""

from __future__ import annotations

import os
import struct

import pytest

from cni.kernel import DeviceBusy, DeviceNotFound, NetnsNotFound
from cni.kernel.rdma import NetlinkRdmaOps
from tests.unit.cni.rdma.fake_kernel import FakeKernel, nla_u32


def test_netns_mode_reads_exclusive_from_the_sys_get_reply() -> None:
    kernel = FakeKernel(mode=0, devices={})
    assert NetlinkRdmaOps(kernel.factory()).netns_mode() == "exclusive"
    assert struct.unpack_from("=H", kernel.requests[0], 4)[0] == 0x1406


def test_netns_mode_reads_shared_from_the_sys_get_reply() -> None:
    kernel = FakeKernel(mode=1, devices={})
    assert NetlinkRdmaOps(kernel.factory()).netns_mode() == "shared"


def test_devices_lists_every_device_of_the_dump() -> None:
    kernel = FakeKernel(mode=0, devices={"mlx5_3": 4, "mlx5_0": 1})
    assert NetlinkRdmaOps(kernel.factory()).devices() == ["mlx5_0", "mlx5_3"]


def test_move_looks_up_the_index_and_sends_it_with_the_target_netns_fd(
    tmp_path: object,
) -> None:
    kernel = FakeKernel(mode=0, devices={"mlx5_0": 1, "mlx5_3": 4})
    NetlinkRdmaOps(kernel.factory()).move("mlx5_3", "/proc/self/ns/net")
    dump, set_req = kernel.requests
    assert struct.unpack_from("=H", dump, 4)[0] == 0x1401
    assert struct.unpack_from("=H", set_req, 4)[0] == 0x1402
    # DEV_INDEX 4, then NET_NS_FD: an fd number that was open at send time.
    assert set_req[16:24] == nla_u32(1, 4)
    atype, fd = struct.unpack_from("=2xHI", set_req, 24)
    assert atype == 68 and fd > 2


def test_move_of_a_device_not_in_the_dump_is_device_not_found() -> None:
    kernel = FakeKernel(mode=0, devices={"mlx5_0": 1})
    with pytest.raises(DeviceNotFound, match="mlx5_9 not found"):
        NetlinkRdmaOps(kernel.factory()).move("mlx5_9", None)
    assert len(kernel.requests) == 1  # no SET for an unknown device


def test_move_refused_with_ebusy_raises_device_busy() -> None:
    kernel = FakeKernel(mode=0, devices={"mlx5_0": 1}, set_errno=16)
    with pytest.raises(DeviceBusy, match="moving RDMA device mlx5_0"):
        NetlinkRdmaOps(kernel.factory()).move("mlx5_0", None)


def test_move_into_a_missing_netns_fails_before_any_request() -> None:
    kernel = FakeKernel(mode=0, devices={"mlx5_0": 1})
    missing = f"/var/run/netns/ri-missing-{os.getpid()}"
    with pytest.raises(NetnsNotFound):
        NetlinkRdmaOps(kernel.factory()).move("mlx5_0", missing)
    assert kernel.requests == []
    assert not os.path.exists(missing)  # never created as a side effect
