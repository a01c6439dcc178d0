# SPDX-License-Identifier: Apache-2.0
"""The production deps' RDMA ops load their netlink adapter at the first call.

(That a plugin process which never moves an RDMA device never imports pyroute2
is pinned in a fresh interpreter by tests/test_import_hygiene.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

import cni.kernel.rdma
from cni.deps import RdmaOnFirstUse


class Recorded:
    """Stands in for NetlinkRdmaOps: keeps every instance, records calls."""

    instances: list[Recorded] = []

    def __init__(self) -> None:
        self.instances.append(self)
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def netns_mode(self) -> str:
        self.calls.append(("netns_mode", ()))
        return "exclusive"

    def devices(self, netns: str | None = None) -> list[str]:
        self.calls.append(("devices", (netns,)))
        return ["mlx5_3"]

    def move(self, dev: str, to_netns: str | None, netns: str | None = None) -> None:
        self.calls.append(("move", (dev, to_netns, netns)))


@pytest.fixture
def adapter(monkeypatch: pytest.MonkeyPatch) -> type[Recorded]:
    monkeypatch.setattr(Recorded, "instances", [])
    monkeypatch.setattr(cni.kernel.rdma, "NetlinkRdmaOps", Recorded)
    return Recorded


def test_nothing_is_built_until_the_first_call(adapter: type[Recorded]) -> None:
    RdmaOnFirstUse()
    assert adapter.instances == []


def test_every_call_reaches_one_adapter_with_its_arguments(
    adapter: type[Recorded],
) -> None:
    ops = RdmaOnFirstUse()
    assert ops.netns_mode() == "exclusive"
    assert ops.devices("/var/run/netns/pod") == ["mlx5_3"]
    ops.move("mlx5_3", "/var/run/netns/pod", None)
    [built] = adapter.instances
    assert built.calls == [
        ("netns_mode", ()),
        ("devices", ("/var/run/netns/pod",)),
        ("move", ("mlx5_3", "/var/run/netns/pod", None)),
    ]
