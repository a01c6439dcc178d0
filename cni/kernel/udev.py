# SPDX-License-Identifier: Apache-2.0
"""``DeviceWaiter`` over pyudev: wait, without sleep-polling, for a PCI
function's netdev or RDMA device to (re)appear after a driver rebind.

pyudev is used only as a wake-up source: libudev refuses to read a fake sysfs
tree, so every answer comes from ``Sysfs`` (plain files under a
root), re-read once when the wait starts and again after each ``net`` or
``infiniband`` uevent. The same code therefore works on a real host and on
the simulated one, where the lab's rebind emulation updates the fake tree and
then creates a veth (whose kernel uevent wakes us).

Events come from udevd (``source="udev"``: after its rules ran, so a netdev
renamed by a udev rule is seen under its final name) when udevd runs
(``/run/udev/control`` exists), else straight from the kernel. With udevd, a
name read from sysfs is only trusted once udevd has announced the device
(an ``add``/``move`` event under the PCI function): until then a rule may
still rename it. Without udevd nothing renames behind our back, so the first
read that shows a device is the answer.

The monitor must be listening before the action that triggers the event
(``with waiter.watch(): vf.rebind(pci); waiter.wait_netdev(pci, 10)``),
otherwise an event arriving between the action and the wait is lost; the
initial sysfs read covers the case where the device is already back.

May import: pyudev (lazily, inside ``watch()``: plugins build a waiter on
every command but only ib-sriov uses it), the stdlib, ``cni.kernel``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from cni.kernel import DeviceWaiter, KernelError, Timeout

log = logging.getLogger(__name__)

UDEVD_CONTROL = Path("/run/udev/control")
SUBSYSTEMS = ("net", "infiniband")


class PciView(Protocol):
    """The two reads the waiter needs (``cni.kernel.sysfs.Sysfs`` has them)."""

    def netdevs(self, pci: str) -> Sequence[str]: ...
    def rdma_devices(self, pci: str) -> Sequence[str]: ...


def udev_source(control: Path = UDEVD_CONTROL) -> str:
    """ "udev" when udevd is running (its control socket exists), else "kernel"."""
    return "udev" if control.exists() else "kernel"


class EventSource(Protocol):
    """What the waiter needs of a ``pyudev.Monitor``."""

    def poll(self, timeout: float | None = None) -> Any: ...


def pyudev_monitor(source: str) -> EventSource:
    """A started pyudev monitor for net and infiniband uevents."""
    import pyudev

    monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source=source)
    for subsystem in SUBSYSTEMS:
        monitor.filter_by(subsystem)
    monitor.start()
    started: EventSource = monitor  # pyudev is untyped; a Monitor polls
    return started


class UdevWaiter:
    """Bounded waits driven by uevents; answers read from ``sysfs``.

    ``monitor_factory(source)`` builds the event source (default: pyudev);
    tests hand in their own to drive the udevd-mode rules.
    """

    def __init__(
        self,
        sysfs: PciView,
        source: str | None = None,
        monitor_factory: Callable[[str], EventSource] = pyudev_monitor,
    ) -> None:
        self._sysfs = sysfs
        self._source = source
        self._factory = monitor_factory
        self._monitor: EventSource | None = None
        self._active = ""

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Listen for net/infiniband uevents for the duration of the block."""
        source = self._source or udev_source()
        try:
            monitor = self._factory(source)
        except (OSError, ValueError) as exc:
            raise KernelError(f"cannot listen for uevents ({source}): {exc}") from exc
        previous = (self._monitor, self._active)
        self._monitor, self._active = monitor, source
        try:
            yield
        finally:
            # pyudev has no close(): libudev closes the socket when the last
            # reference goes (Monitor.__del__), which is here in CPython.
            self._monitor, self._active = previous
            del monitor

    def wait_netdev(self, pci: str, timeout: float) -> str:
        return self._wait(pci, timeout, "net", self._sysfs.netdevs, "netdev")

    def wait_rdma(self, pci: str, timeout: float) -> str:
        return self._wait(
            pci, timeout, "infiniband", self._sysfs.rdma_devices, "RDMA device"
        )

    def _wait(
        self,
        pci: str,
        timeout: float,
        subsystem: str,
        read: Callable[[str], Sequence[str]],
        what: str,
    ) -> str:
        monitor = self._monitor
        if monitor is None:
            raise RuntimeError("UdevWaiter.wait_* must be called inside watch()")
        deadline = time.monotonic() + timeout
        events = 0
        # With udevd a rule may still rename what sysfs shows: wait for its word.
        announced = self._active != "udev"
        marker = f"/{pci}/{subsystem}/"
        while True:
            names = _read(read, pci)
            if names and announced:
                log.debug(
                    "%s of %s is %s after %d uevent(s)", what, pci, names[0], events
                )
                return names[0]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(
                    f"no {what} appeared for PCI device {pci} within {timeout:g}s "
                    f"({events} {subsystem} uevent(s) seen)"
                )
            device = monitor.poll(timeout=remaining)
            if device is None or device.subsystem != subsystem:
                continue
            events += 1
            if device.action in ("add", "move") and marker in (device.sys_path or ""):
                announced = True


def _read(read: Callable[[str], Sequence[str]], pci: str) -> list[str]:
    # The PCI function itself may be missing for a moment while the driver
    # rebinds on some kernels: that is "nothing yet", not an error.
    try:
        return sorted(read(pci))
    except (KernelError, OSError):
        return []


# Conformance with the kernel seam, checked by mypy (Go's `var _ X = &Y{}`).
_conforms: type[DeviceWaiter] = UdevWaiter
