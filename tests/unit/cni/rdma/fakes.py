# SPDX-License-Identifier: Apache-2.0
"""Test doubles for the rdma and ib-sriov unit tests (no kernel, no root).

``FakeRdma`` keeps exclusive-mode visibility (a device is only seen from the
netns it is in, a dead netns returns its devices to the host); ``NotUsed``
stands for a dependency a test must not touch. A PF's VF table is the fake
kernel's (``tests.doubles.fake_kernel.FakeVfOps``, the one fake ``VfOps``).
"""

from __future__ import annotations

from typing import Any

from cni.kernel import (
    DeviceNotFound,
    KernelError,
    LinkExists,
    NetnsNotFound,
    NetnsPath,
    NotSupported,
    RdmaOps,
)

POD = "/var/run/netns/pod1"


class FakeRdma:
    """RdmaOps with exclusive-mode visibility: a device is seen only where it is."""

    def __init__(self, mode: str = "exclusive", **where: str | None) -> None:
        self.mode = mode
        self.where: dict[str, str | None] = dict(where)  # dev -> netns (None host)
        self.alive: set[str] = {POD}
        self.fail_move: KernelError | None = None
        self.fail_rename: KernelError | None = None
        self.calls: list[tuple[str, NetnsPath, NetnsPath]] = []
        self.renames: list[tuple[str, str, NetnsPath]] = []

    def netns_mode(self) -> str:
        if self.mode == "unsupported":
            raise NotSupported("this host has no RDMA netlink support")
        return self.mode

    def _check(self, netns: NetnsPath) -> None:
        if netns is not None and netns not in self.alive:
            raise NetnsNotFound(f"{netns} does not exist")

    def devices(self, netns: NetnsPath = None) -> list[str]:
        self._check(netns)
        return sorted(d for d, ns in self.where.items() if ns == netns)

    def move(self, dev: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        self.calls.append((dev, to_netns, netns))
        self._check(to_netns)
        self._check(netns)
        if self.fail_move is not None:
            raise self.fail_move
        if self.where.get(dev, "missing") != netns:
            raise DeviceNotFound(f"RDMA device {dev} not found")
        self.where[dev] = to_netns

    def rename(self, dev: str, new_name: str, netns: NetnsPath = None) -> None:
        """Names are unique per host, as on released kernels (EEXIST)."""
        self.renames.append((dev, new_name, netns))
        self._check(netns)
        if self.fail_rename is not None:
            raise self.fail_rename
        if self.where.get(dev, "missing") != netns:
            raise DeviceNotFound(f"RDMA device {dev} not found")
        if new_name != dev and new_name in self.where:
            raise LinkExists(f"RDMA device name {new_name} is taken")
        self.where[new_name] = self.where.pop(dev)

    def vanish(self, netns: str) -> None:
        """The kernel returns a dead netns's RDMA devices to the host."""
        self.alive.discard(netns)
        for dev, ns in self.where.items():
            if ns == netns:
                self.where[dev] = None


_conforms: type[RdmaOps] = FakeRdma


class NotUsed:
    """A dependency the code under test must not call (only ``close``)."""

    def __init__(self, what: str) -> None:
        self._what = what

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{self._what}.{name} must not be used here")
