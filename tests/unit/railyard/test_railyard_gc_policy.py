# SPDX-License-Identifier: Apache-2.0
"""``railyard gc``'s policy: which allocations a round releases, and how."""

from __future__ import annotations

import dataclasses

from railyard.gc import (
    ClusterAllocation,
    ClusterState,
    owner_of,
    plan,
    run_once,
)


def alloc(
    ip: str,
    uid: str,
    name: str = "p",
    cid: str = "",
    sticky: bool = False,
    ns: str = "default",
) -> ClusterAllocation:
    return ClusterAllocation(
        pool="gpu1-net11",
        ip=ip,
        network="gpu1-sriov",
        container_id=cid or f"c-{uid or ip}",
        ifname="net1",
        pod_namespace=ns,
        pod_name=name,
        pod_uid=uid,
        sticky=sticky,
    )


def cluster(
    pods: dict[str, tuple[str, str]], statefulsets: set[tuple[str, str]] = frozenset()
) -> ClusterState:
    return ClusterState(
        pod_uids=frozenset(pods),
        pod_names=frozenset(pods.values()),
        statefulsets=frozenset(statefulsets),
    )


def released(allocations: list[ClusterAllocation], state: ClusterState) -> list[str]:
    return [r.allocation.ip for r in plan(allocations, state)[0]]


def test_an_address_of_a_deleted_pod_is_released_a_live_ones_kept() -> None:
    state = cluster({"uid-live": ("default", "live")})
    allocations = [alloc("10.0.0.1", "uid-live", "live"), alloc("10.0.0.2", "uid-dead")]
    releases, kept, _ = plan(allocations, state)
    assert [(r.allocation.ip, r.whole_address) for r in releases] == [
        ("10.0.0.2", False)
    ]
    assert kept == 1


def test_a_pod_recreated_under_the_same_name_is_another_pod() -> None:
    state = cluster({"uid-new": ("default", "web")})
    allocations = [
        alloc("10.0.0.1", "uid-old", "web"),
        alloc("10.0.0.2", "uid-new", "web"),
    ]
    assert released(allocations, state) == ["10.0.0.1"]


def test_a_statefulset_pods_sticky_address_stays_held_while_its_owner_exists() -> None:
    state = cluster({}, {("default", "db")})
    attached = alloc("10.0.0.1", "uid-gone", "db-0", sticky=True)
    held = _held(alloc("10.0.0.2", "uid-older", "db-1", sticky=True))
    releases, kept, _ = plan([attached, held], state)
    # The gone pod's attachment is released as a DEL would: the address
    # stays held for db-0; db-1's held address is kept.
    assert [(r.allocation.ip, r.whole_address) for r in releases] == [
        ("10.0.0.1", False)
    ]
    assert kept == 1


def _held(a: ClusterAllocation) -> ClusterAllocation:
    """The address ipamd keeps for a sticky pod's name between its runs."""
    return dataclasses.replace(a, container_id="", sticky=True)


def test_sticky_addresses_go_with_their_statefulset() -> None:
    state = cluster({}, {("other", "db")})  # same name, another namespace
    attached = alloc("10.0.0.1", "uid-gone", "db-0", sticky=True)
    held = _held(alloc("10.0.0.2", "uid-older", "db-1", sticky=True))
    releases, _, _ = plan([attached, held], state)
    assert [(r.allocation.ip, r.whole_address) for r in releases] == [
        ("10.0.0.1", True),
        ("10.0.0.2", True),
    ]


def test_a_held_address_whose_pod_exists_again_is_kept() -> None:
    state = cluster({"uid-new": ("default", "solo")})
    held = _held(alloc("10.0.0.3", "uid-old", "solo", sticky=True))
    assert released([held], state) == []


def test_an_allocation_without_a_pod_uid_is_never_judged() -> None:
    releases, kept, unjudged = plan([alloc("10.0.0.1", "", "podman")], cluster({}))
    assert (releases, kept, unjudged) == ([], 0, 1)


def test_the_owner_is_the_name_before_the_ordinal() -> None:
    assert owner_of("web-0") == "web"
    assert owner_of("my-db-12") == "my-db"
    assert owner_of("web") is None
    assert owner_of("web-01") is None  # not an ordinal a StatefulSet writes
    assert owner_of("web-abc12") is None


class FakeIpamd:
    def __init__(self, allocations: list[ClusterAllocation]) -> None:
        self._allocations = allocations
        self.calls: list[tuple[str, str, str]] = []

    def allocations(self) -> list[ClusterAllocation]:
        self.calls.append(("list", "", ""))
        return self._allocations

    def release_attachment(self, container_id: str, ifname: str) -> int:
        self.calls.append(("release", container_id, ifname))
        return 1

    def release_address(self, pool: str, ip: str) -> int:
        self.calls.append(("release-address", pool, ip))
        return 1


class FakeCluster:
    def __init__(self, state: ClusterState, ipamd: FakeIpamd) -> None:
        self._state = state
        self._ipamd = ipamd

    def state(self) -> ClusterState:
        self._ipamd.calls.append(("pods", "", ""))
        return self._state


def test_allocations_are_listed_before_the_pods() -> None:
    ipamd = FakeIpamd([alloc("10.0.0.1", "uid-dead")])
    run_once(ipamd, FakeCluster(cluster({}), ipamd), False, lambda line: None)
    assert [c[0] for c in ipamd.calls] == ["list", "pods", "release"]


def test_one_release_per_attachment_frees_both_families() -> None:
    v4 = alloc("10.0.0.1", "uid-dead")
    v6 = dataclasses.replace(v4, ip="fd00::1")
    ipamd = FakeIpamd([v4, v6])
    lines: list[str] = []
    report = run_once(ipamd, FakeCluster(cluster({}), ipamd), False, lines.append)
    assert ipamd.calls[2:] == [("release", "c-uid-dead", "net1")]
    assert len(report.released) == 2 and len(lines) == 2


def test_dry_run_says_what_it_would_release_and_releases_nothing() -> None:
    ipamd = FakeIpamd([alloc("10.0.0.1", "uid-dead", "gone")])
    lines: list[str] = []
    run_once(ipamd, FakeCluster(cluster({}), ipamd), True, lines.append)
    assert [c[0] for c in ipamd.calls] == ["list", "pods"]
    assert lines == [
        "would release 10.0.0.1 (pool gpu1-net11) of default/gone (uid uid-dead, "
        "container c-uid-dead net1): pod gone"
    ]
