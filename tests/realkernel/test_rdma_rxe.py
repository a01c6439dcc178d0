# SPDX-License-Identifier: Apache-2.0
"""The production RdmaOps adapter (cni.kernel.rdma) against real RDMA devices.

Soft-RoCE (rxe) devices over dummy netdevs. In shared mode (the default) every
namespace sees every device and the kernel refuses any move; in exclusive mode
(a VM of its own: the switch is refused once a second netns exists) each
namespace sees its own, Debian's rxe cannot move (it lacks the driver hook the
kernel requires), and the test-only build with the hook moves in and out.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Iterator

import pytest

from cni.kernel import DeviceNotFound, NetnsNotFound, NotSupported
from cni.kernel.rdma import NetlinkRdmaOps
from tests.realkernel.conftest import (
    INSIDE,
    movable_rxe,
    rdma_links,
    set_rdma_netns_mode,
    sh,
)

MakeRxe = Callable[..., str]
shared = pytest.mark.realkernel
exclusive = pytest.mark.realkernel(vm="exclusive")


@pytest.fixture
def ops() -> NetlinkRdmaOps:
    return NetlinkRdmaOps()


@pytest.fixture
def exclusive_mode() -> Iterator[None]:
    """This VM's mode set to exclusive before its first namespace exists."""
    if INSIDE:
        set_rdma_netns_mode("exclusive")
    yield


# ---------------------------------------------------------------- shared mode


@shared
def test_shared_mode_every_netns_sees_every_device(
    ops: NetlinkRdmaOps, make_rxe: MakeRxe, make_netns: Callable[..., str]
) -> None:
    dev = make_rxe("i25rxs0")
    pod = make_netns("i25pod")
    assert ops.netns_mode() == "shared"
    assert dev in ops.devices()
    assert dev in ops.devices(pod)


@shared
def test_shared_mode_refuses_every_move_cleanly(
    ops: NetlinkRdmaOps, make_rxe: MakeRxe, make_netns: Callable[..., str]
) -> None:
    dev = make_rxe("i25rxs1")
    pod = make_netns("i25pod")
    with pytest.raises(NotSupported) as err:
        ops.move(dev, pod)
    assert err.value.errno == errno.EOPNOTSUPP
    assert str(err.value) == (
        f"moving RDMA device {dev} to {pod}: Operation not supported (errno 95)"
    )
    assert dev in rdma_links()


@shared
def test_moving_a_device_that_is_not_there(
    ops: NetlinkRdmaOps, make_netns: Callable[..., str], make_rxe: MakeRxe
) -> None:
    make_rxe("i25rxs2")
    pod = make_netns("i25pod")
    with pytest.raises(
        DeviceNotFound, match="RDMA device i25nothere not found in the host"
    ):
        ops.move("i25nothere", pod)


# ------------------------------------------------------------- exclusive mode


@exclusive
def test_exclusive_mode_is_reported(exclusive_mode: None, ops: NetlinkRdmaOps) -> None:
    assert ops.netns_mode() == "exclusive"


@exclusive
def test_debians_rxe_cannot_move_and_says_so(
    exclusive_mode: None,
    ops: NetlinkRdmaOps,
    make_rxe: MakeRxe,
    make_netns: Callable[..., str],
) -> None:
    dev = make_rxe("i25rxe0")
    pod = make_netns("i25pod")
    assert dev in ops.devices() and dev not in ops.devices(pod)
    with pytest.raises(NotSupported) as err:
        ops.move(dev, pod)
    # No extended-ack text: the kernel's errno is all there is to report.
    assert str(err.value) == (
        f"moving RDMA device {dev} to {pod}: Operation not supported (errno 95)"
    )
    assert dev in ops.devices() and ops.devices(pod) == []


@exclusive
def test_the_movable_rxe_moves_into_a_pod_and_back(
    exclusive_mode: None,
    ops: NetlinkRdmaOps,
    make_rxe: MakeRxe,
    make_netns: Callable[..., str],
) -> None:
    dev = make_rxe("i25rxe1", movable_rxe())
    pod = make_netns("i25pod")
    ops.move(dev, pod)
    assert dev not in ops.devices()
    assert ops.devices(pod) == [dev]
    assert rdma_links(pod) == [dev]  # the rdma tool inside the pod agrees
    ops.move(dev, None, netns=pod)
    assert dev in ops.devices() and ops.devices(pod) == []


@exclusive
def test_a_device_left_in_a_destroyed_pod_comes_back_to_the_host(
    exclusive_mode: None,
    ops: NetlinkRdmaOps,
    make_rxe: MakeRxe,
    make_netns: Callable[..., str],
) -> None:
    dev = make_rxe("i25rxe2", movable_rxe())
    pod = make_netns("i25pod")
    ops.move(dev, pod)
    sh("ip", "netns", "del", pod.rsplit("/", 1)[1])
    deadline = time.monotonic() + 20  # the netns is torn down by a work queue
    while dev not in ops.devices():
        assert time.monotonic() < deadline, f"{dev} did not come back: {ops.devices()}"
        time.sleep(0.1)
    with pytest.raises(NetnsNotFound):
        ops.move(dev, None, netns=pod)  # DEL after the runtime removed the pod


@exclusive
def test_the_mode_cannot_change_while_pods_exist(
    exclusive_mode: None, ops: NetlinkRdmaOps, make_netns: Callable[..., str]
) -> None:
    make_netns("i25pod")
    proc = sh("rdma", "system", "set", "netns", "shared", check=False)
    assert proc.returncode != 0 and "busy" in proc.stderr.lower()
    assert ops.netns_mode() == "exclusive"
