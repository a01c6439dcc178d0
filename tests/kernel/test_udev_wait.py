# SPDX-License-Identifier: Apache-2.0
"""UdevWaiter against real kernel uevents from veth create, rename and delete.

The PCI view is a tmp fake tree (railyard_sim.pci_tree), updated *before* the veth
action, as the simulated host's rebind emulation does. The action is started
from the waiter's first sysfs read (which sees nothing), so the only way the
wait can return is being woken by the uevent and re-reading the tree: the
tests prove the event path, not a lucky first read.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cni.kernel import Timeout
from cni.kernel.udev import UdevWaiter, udev_source
from railyard_sim.pci_tree import PciTree
from tests.conftest import unique_name

pytestmark = pytest.mark.kernel

PF = "0000:3b:00.0"
VF = "0000:3b:00.2"


class TreeView:
    """Reads the fake tree; runs ``on_first_empty`` once, after the first miss."""

    def __init__(self, tree: PciTree) -> None:
        self.tree = tree
        self.reads = 0
        self.on_first_empty: Callable[[], None] | None = None
        self.thread: threading.Thread | None = None

    def netdevs(self, pci: str) -> list[str]:
        self.reads += 1
        names = self.tree.netdevs(pci)
        self._maybe_fire(names)
        return names

    def rdma_devices(self, pci: str) -> list[str]:
        self.reads += 1
        ib = self.tree.device(pci) / "infiniband"
        names = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
        self._maybe_fire(names)
        return names

    def join(self) -> None:
        """Wait for the action thread, so teardown never races its ``ip``."""
        if self.thread is not None:
            self.thread.join()

    def _maybe_fire(self, names: list[str]) -> None:
        if not names and self.on_first_empty is not None:
            action, self.on_first_empty = self.on_first_empty, None
            self.thread = threading.Thread(target=action)
            self.thread.start()


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def veths() -> Iterator[list[str]]:
    """Names of veths the test creates; each is deleted at teardown if present."""
    made: list[str] = []
    try:
        yield made
    finally:
        for name in made:
            subprocess.run(
                ["ip", "link", "del", name], check=False, capture_output=True
            )


@pytest.fixture
def view(tmp_path: Path) -> TreeView:
    tree = PciTree(tmp_path / "sys")
    tree.pf(PF, None, numvfs=1)
    tree.vf(PF, 0, VF, None)
    return TreeView(tree)


def test_wait_netdev_wakes_on_the_veth_add_uevent(view: TreeView, veths) -> None:
    name = unique_name("ri")
    veths.append(name)

    def bind() -> None:
        view.tree.set_netdev(VF, name)
        ip("link", "add", name, "type", "veth", "peer", "name", name + "p")

    view.on_first_empty = bind
    waiter = UdevWaiter(view)
    with waiter.watch():
        started = time.monotonic()
        assert waiter.wait_netdev(VF, timeout=10) == name
        assert time.monotonic() - started < 5
    view.join()
    assert view.reads >= 2  # the first read missed; a uevent caused the next
    ip("link", "show", name)  # the real link exists (read back through iproute2)


def test_wait_netdev_wakes_on_a_rename_uevent(view: TreeView, veths) -> None:
    old, new = unique_name("ri"), unique_name("ri")
    veths.extend([old, new])
    ip("link", "add", old, "type", "veth", "peer", "name", old + "p")

    def rebind_renamed() -> None:
        view.tree.set_netdev(VF, new)
        ip("link", "set", old, "name", new)

    view.on_first_empty = rebind_renamed
    waiter = UdevWaiter(view)
    with waiter.watch():
        assert waiter.wait_netdev(VF, timeout=10) == new
    view.join()
    assert view.reads >= 2


def test_wait_netdev_wakes_on_a_veth_delete_uevent(view: TreeView, veths) -> None:
    gone, back = unique_name("ri"), unique_name("ri")
    veths.append(gone)
    ip("link", "add", gone, "type", "veth", "peer", "name", gone + "p")

    def unbind_then_tree_shows_new_name() -> None:
        view.tree.set_netdev(VF, back)
        ip("link", "del", gone)

    view.on_first_empty = unbind_then_tree_shows_new_name
    waiter = UdevWaiter(view)
    with waiter.watch():
        assert waiter.wait_netdev(VF, timeout=10) == back
    view.join()
    assert view.reads >= 2


def test_wait_netdev_times_out_when_events_never_bring_the_netdev(
    view: TreeView, veths
) -> None:
    other = unique_name("ri")
    veths.append(other)
    # A uevent for an unrelated link wakes the waiter, which must keep waiting.
    view.on_first_empty = lambda: ip(
        "link", "add", other, "type", "veth", "peer", "name", other + "p"
    )
    waiter = UdevWaiter(view)
    with waiter.watch():
        started = time.monotonic()
        with pytest.raises(Timeout, match=f"no netdev appeared for PCI device {VF}"):
            waiter.wait_netdev(VF, timeout=1.0)
        elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 3.0
    view.join()
    ip("link", "show", other)


def test_wait_netdev_returns_at_once_when_sysfs_already_shows_it(
    view: TreeView,
) -> None:
    view.tree.set_netdev(VF, "ib7")
    waiter = UdevWaiter(view)
    with waiter.watch():
        assert waiter.wait_netdev(VF, timeout=0.5) == "ib7"
    assert view.reads == 1


def test_wait_rdma_reads_infiniband_and_times_out_without_it(view: TreeView) -> None:
    waiter = UdevWaiter(view)
    with waiter.watch():
        with pytest.raises(Timeout, match="no RDMA device appeared"):
            waiter.wait_rdma(VF, timeout=0.2)
        view.tree.rdma(VF, "mlx5_4")
        assert waiter.wait_rdma(VF, timeout=0.2) == "mlx5_4"


def test_waiting_outside_watch_is_a_programming_error(view: TreeView) -> None:
    with pytest.raises(RuntimeError, match="inside watch"):
        UdevWaiter(view).wait_netdev(VF, timeout=0.1)


def test_udev_source_follows_udevd_control_socket(tmp_path: Path) -> None:
    assert udev_source(tmp_path / "control") == "kernel"
    (tmp_path / "control").touch()
    assert udev_source(tmp_path / "control") == "udev"
