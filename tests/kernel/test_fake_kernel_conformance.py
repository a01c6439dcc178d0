# SPDX-License-Identifier: Apache-2.0
"""The kernel behaviours the lifecycle relies on, run against both the real
``NetlinkLinks``/``Namespaces`` (root, real netns, veth) and ``FakeKernel``.

Each case states one behaviour; the fake passes only the cases the real
kernel passes, which is what keeps the unit tier's rollback matrix honest.
The fake cases need no root; the real ones are in the kernel tier.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from cni.kernel import (
    KernelError,
    LinkExists,
    LinkNotFound,
    Links,
    Netns,
    NetnsNotFound,
    RouteSpec,
    RuleSpec,
)
from tests.conftest import unique_name
from tests.doubles.fake_kernel import FakeKernel

MISSING = "/var/run/netns/ry-no-such-netns"


@dataclass
class Backend:
    links: Links
    netns: Netns
    #: A new, down, Ethernet-like link (a veth end) in a netns; its name.
    nic: Callable[[str | None], str]
    #: A new empty netns; its path.
    new_netns: Callable[[], str]


@pytest.fixture
def fake() -> Backend:
    kernel = FakeKernel()
    count = iter(range(1000))

    def nic(netns: str | None) -> str:
        name = unique_name("rk")
        kernel.add_link(name, netns)
        return name

    def new_netns() -> str:
        return kernel.add_netns(f"/var/run/netns/fake{next(count)}")

    return Backend(kernel.links, kernel.netns, nic, new_netns)


@pytest.fixture
def real(request: pytest.FixtureRequest) -> Iterator[Backend]:
    from cni.kernel.links import NetlinkLinks
    from cni.kernel.netns import Namespaces
    from tests.kernel.conftest import Host, ip

    host: Host = request.getfixturevalue("host")
    links = NetlinkLinks()

    def nic(netns: str | None) -> str:
        a, b = unique_name("rk"), unique_name("rk")
        ip(netns, "link", "add", a, "type", "veth", "peer", "name", b)
        return a

    try:
        yield Backend(links, Namespaces(), nic, host.make)
    finally:
        links.close()


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.kernel)])
def k(request: pytest.FixtureRequest) -> Backend:
    backend: Backend = request.getfixturevalue(request.param)
    return backend


def test_a_move_takes_the_link_down_and_drops_its_addresses_and_routes(
    k: Backend,
) -> None:
    pod = k.new_netns()
    a = k.nic(None)
    k.links.set_up(a)
    k.links.add_address(a, "192.0.2.5/24")
    k.links.add_route(RouteSpec(dst="198.51.100.0/24", gw="192.0.2.1", dev=a))
    k.links.move(a, pod)
    moved = k.links.get(a, pod)
    assert not moved.up
    assert k.links.addresses(a, pod) == []
    assert k.links.find(a) is None
    assert [r for r in k.links.routes() if r.dst == "198.51.100.0/24"] == []


def test_an_up_link_can_be_renamed_and_stays_up(k: Backend) -> None:
    # Older kernels refuse it (EBUSY); this one allows it. The lifecycle
    # takes links down before renaming them anyway (sriov-cni ReleaseVF).
    a, new = k.nic(None), unique_name("rk")
    k.links.set_up(a)
    k.links.rename(a, new)
    assert k.links.get(new).up


def test_a_rename_or_move_onto_a_taken_name_is_link_exists(k: Backend) -> None:
    pod = k.new_netns()
    a, b = k.nic(None), k.nic(None)
    with pytest.raises(LinkExists):
        k.links.rename(a, b)
    squatter = k.nic(pod)
    k.links.rename(a, squatter)  # free in the host: fine
    with pytest.raises(LinkExists):
        k.links.move(squatter, pod)
    assert k.links.find(squatter) is not None  # still in the host


def test_a_missing_netns_or_link_has_its_own_error(k: Backend) -> None:
    with pytest.raises(NetnsNotFound):
        k.links.find("eth0", MISSING)
    with pytest.raises(NetnsNotFound):
        k.netns.check(MISSING)
    assert not k.netns.exists(MISSING)
    with pytest.raises(LinkNotFound):
        k.links.get("rk-nothing")
    with pytest.raises(LinkNotFound):
        k.links.set_mtu("rk-nothing", 1500)


def test_addresses_exist_once_and_a_missing_one_is_eaddrnotavail(k: Backend) -> None:
    a = k.nic(None)
    k.links.add_address(a, "192.0.2.5/24")
    with pytest.raises(LinkExists):
        k.links.add_address(a, "192.0.2.5/24")
    with pytest.raises(KernelError) as info:
        k.links.del_address(a, "192.0.2.6/24")
    assert info.value.errno == errno.EADDRNOTAVAIL


def test_an_address_on_an_up_link_adds_the_prefix_route_to_main(k: Backend) -> None:
    a, b = k.nic(None), k.nic(None)
    for name in (a, b):
        k.links.set_up(name)
    k.links.add_address(a, "192.0.2.5/24")
    k.links.add_address(b, "203.0.113.5/24", noprefixroute=True)
    main = {(r.dst, r.dev) for r in k.links.routes(254, 2)}
    assert ("192.0.2.0/24", a) in main
    assert not any(dev == b for _dst, dev in main)


def test_set_down_drops_routes_and_ipv6_addresses_but_keeps_ipv4(k: Backend) -> None:
    a = k.nic(None)
    k.links.set_up(a)
    k.links.add_address(a, "192.0.2.5/24")
    k.links.add_address(a, "2001:db8::5/64", nodad=True)
    k.links.add_route(RouteSpec(dst="198.51.100.0/24", gw="192.0.2.1", dev=a, table=77))
    k.links.set_down(a)
    assert k.links.addresses(a) == ["192.0.2.5/24"]
    assert k.links.routes(77, 2) == []


def test_a_route_through_a_down_link_is_enetdown(k: Backend) -> None:
    a = k.nic(None)
    with pytest.raises(KernelError) as info:
        k.links.add_route(RouteSpec(dst="198.51.100.0/24", dev=a, table=77))
    assert info.value.errno == errno.ENETDOWN


def test_missing_routes_and_rules_and_duplicate_rules(k: Backend) -> None:
    a = k.nic(None)
    k.links.set_up(a)
    with pytest.raises(KernelError) as info:
        k.links.del_route(RouteSpec(dst="198.51.100.0/24", dev=a, table=77))
    assert info.value.errno == errno.ESRCH
    rule = RuleSpec("192.0.2.5/32", 77, 901)
    k.links.add_rule(rule)
    try:
        with pytest.raises(LinkExists):
            k.links.add_rule(rule)
    finally:
        k.links.del_rule(rule)
    with pytest.raises(KernelError) as info:
        k.links.del_rule(rule)
    assert info.value.errno == errno.ENOENT
