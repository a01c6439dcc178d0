# SPDX-License-Identifier: Apache-2.0
"""UdevWaiter's rules with a scripted event source (the kernel tier uses real
uevents from veths; udevd does not run here, so its mode is pinned this way).

With udevd a name in sysfs is trusted only once udevd announced the device
(its rules may rename it first); without udevd the first read that shows a
device is the answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from cni.kernel import DeviceNotFound, Timeout
from cni.kernel.sysfs import Sysfs
from cni.kernel.udev import UdevWaiter
from railyard_sim.pci_tree import PciTree

PF = "0000:3b:00.0"
VF = "0000:3b:00.2"
OTHER = "0000:3b:00.3"


@dataclass
class Event:
    action: str
    subsystem: str
    sys_path: str
    before: Callable[[], None] = lambda: None  # what happened on the host


class ScriptedSource:
    """Hands out events in order, running each one's host change first."""

    def __init__(self, events: list[Event]) -> None:
        self.events = list(events)
        self.polls = 0

    def poll(self, timeout: float | None = None) -> Event | None:
        self.polls += 1
        if not self.events:
            time.sleep(timeout or 0)  # a real poll blocks until its timeout
            return None
        event = self.events.pop(0)
        event.before()
        return event


def devpath(pci: str, subsystem: str, name: str) -> str:
    return f"/sys/devices/pci0000:3a/0000:3a:00.0/{pci}/{subsystem}/{name}"


@pytest.fixture
def tree(tmp_path: Path) -> PciTree:
    t = PciTree(tmp_path / "sys")
    t.pf(PF, "ib0", numvfs=2)
    t.vf(PF, 0, VF, None)
    t.vf(PF, 1, OTHER, None)
    return t


def waiter(tree: PciTree, source: str, events: list[Event]) -> UdevWaiter:
    scripted = ScriptedSource(events)
    return UdevWaiter(
        Sysfs(root=tree.root), source=source, monitor_factory=lambda _src: scripted
    )


def test_with_udevd_the_kernel_name_waits_for_udevs_rename(tree: PciTree) -> None:
    tree.set_netdev(VF, "ib2")  # the kernel's name, before udev's rules ran
    w = waiter(
        tree,
        "udev",
        [
            Event(
                "move",
                "net",
                devpath(VF, "net", "ibp59s0f2"),
                before=lambda: tree.set_netdev(VF, "ibp59s0f2"),
            ),
        ],
    )
    with w.watch():
        assert w.wait_netdev(VF, timeout=2) == "ibp59s0f2"


def test_with_udevd_events_of_other_functions_do_not_count(tree: PciTree) -> None:
    tree.set_netdev(VF, "ib2")
    w = waiter(
        tree,
        "udev",
        [
            Event("add", "net", devpath(OTHER, "net", "ib3")),
            Event("add", "infiniband", devpath(VF, "infiniband", "mlx5_4")),
        ],
    )
    with w.watch(), pytest.raises(Timeout, match=r"\(1 net uevent"):
        w.wait_netdev(VF, timeout=0.1)


def test_with_udevd_an_rdma_device_is_trusted_after_its_add(tree: PciTree) -> None:
    w = waiter(
        tree,
        "udev",
        [
            Event(
                "add",
                "infiniband",
                devpath(VF, "infiniband", "mlx5_4"),
                before=lambda: tree.rdma(VF, "mlx5_4"),
            ),
        ],
    )
    with w.watch():
        assert w.wait_rdma(VF, timeout=2) == "mlx5_4"


def test_without_udevd_the_first_read_is_the_answer(tree: PciTree) -> None:
    tree.set_netdev(VF, "ib2")
    source = ScriptedSource([])
    w = UdevWaiter(
        Sysfs(root=tree.root), source="kernel", monitor_factory=lambda _src: source
    )
    with w.watch():
        assert w.wait_netdev(VF, timeout=2) == "ib2"
    assert source.polls == 0


def test_a_pci_function_missing_for_a_moment_is_not_an_error(tree: PciTree) -> None:
    gone = "0000:3b:00.4"  # appears only with the event

    def bound() -> None:
        tree.vf(PF, 2, gone, "ib4")

    w = waiter(
        tree,
        "kernel",
        [
            Event(
                "add",
                "net",
                devpath(gone, "net", "ib4"),
                before=bound,
            ),
        ],
    )
    with pytest.raises(DeviceNotFound):
        Sysfs(root=tree.root).netdevs(gone)
    with w.watch():
        assert w.wait_netdev(gone, timeout=2) == "ib4"
