# SPDX-License-Identifier: Apache-2.0
"""Namespaces and in_netns on real namespaces (the test runs in its own netns)."""

from __future__ import annotations

import os

import pytest

from cni.kernel import NetnsNotFound
from cni.kernel.links import NetlinkLinks
from cni.kernel.netns import Namespaces, in_netns, netns_key
from tests.conftest import unique_name
from tests.kernel.conftest import Host, ip, ip_json

pytestmark = pytest.mark.kernel


def host_links() -> set[str]:
    return {x["ifname"] for x in ip_json(None, "link", "show")}


def test_exists_check_and_is_current(host: Host):
    ns = Namespaces(NetlinkLinks())
    other = host.make()
    assert ns.exists(host.path) and ns.exists(other)
    ns.check(other)
    assert ns.is_current(host.path)
    assert ns.is_current("/proc/self/ns/net")
    assert not ns.is_current(other)


def test_missing_path_is_reported_and_never_created(host: Host):
    ns = Namespaces(NetlinkLinks())
    missing = f"/var/run/netns/{unique_name('rk')}"
    assert not ns.exists(missing)
    with pytest.raises(NetnsNotFound):
        ns.check(missing)
    assert not os.path.exists(missing)


def test_a_deleted_named_netns_is_not_found(host: Host):
    ns = Namespaces(NetlinkLinks())
    gone = host.make()
    ip(None, "netns", "del", os.path.basename(gone))
    assert not ns.exists(gone)


def test_in_netns_switches_and_restores_even_on_error(host: Host):
    other = host.make()
    with in_netns(other):
        assert netns_key("/proc/thread-self/ns/net") == netns_key(other)
    assert netns_key("/proc/thread-self/ns/net") == netns_key(host.path)
    with pytest.raises(RuntimeError), in_netns(other):
        raise RuntimeError("boom")
    assert netns_key("/proc/thread-self/ns/net") == netns_key(host.path)


def test_temporary_is_a_fresh_empty_netns(host: Host):
    with Namespaces(NetlinkLinks()).temporary() as tmp:
        assert netns_key(tmp) != netns_key(host.path)
        links = NetlinkLinks()
        try:
            assert [ln.name for ln in links.list(tmp)] == ["lo"]
        finally:
            links.close()
    assert netns_key("/proc/thread-self/ns/net") == netns_key(host.path)
    with pytest.raises(NetnsNotFound):
        netns_key(tmp)  # the holding fd is closed


def test_temporary_moves_a_renamed_link_back_to_the_own_netns(host: Host):
    a, b = unique_name("rk"), unique_name("rk")
    ip(None, "link", "add", a, "type", "veth", "peer", "name", b)
    renamed = unique_name("rk")
    links = NetlinkLinks()
    try:
        with Namespaces(NetlinkLinks()).temporary() as tmp:
            links.move(a, tmp)
            links.rename(a, renamed, tmp)
            assert a not in host_links()
        assert renamed in host_links()
    finally:
        links.close()


def test_temporary_returns_links_even_when_the_block_fails(host: Host):
    a, b = unique_name("rk"), unique_name("rk")
    ip(None, "link", "add", a, "type", "veth", "peer", "name", b)
    links = NetlinkLinks()
    try:
        with pytest.raises(RuntimeError), Namespaces(links).temporary() as tmp:
            links.move(a, tmp)
            raise RuntimeError("step failed")
        assert a in host_links()
    finally:
        links.close()


def test_temporary_renames_on_the_way_back_when_the_name_is_taken(host: Host):
    a, b = unique_name("rk"), unique_name("rk")
    ip(None, "link", "add", a, "type", "veth", "peer", "name", b)
    links = NetlinkLinks()
    try:
        with Namespaces(NetlinkLinks()).temporary() as tmp:
            index = links.get(a).index
            links.move(a, tmp)
            # Someone takes the name in the host meanwhile.
            ip(
                None,
                "link",
                "add",
                a,
                "type",
                "veth",
                "peer",
                "name",
                unique_name("rk"),
            )
        back = [
            x for x in ip_json(None, "link", "show") if x["ifname"].startswith("ryback")
        ]
        assert len(back) == 1
        assert back[0]["ifindex"] == index
    finally:
        links.close()


def test_temporary_makes_links_drop_their_socket_for_it(host: Host):
    links = NetlinkLinks()
    try:
        links.list(None)
        before = len(os.listdir("/proc/self/fd"))
        with Namespaces(links).temporary() as tmp:
            links.list(tmp)
            assert len(os.listdir("/proc/self/fd")) > before
        # The cached socket would keep the dead netns alive: it must be gone.
        assert len(os.listdir("/proc/self/fd")) == before
        assert "lo" in {ln.name for ln in links.list(None)}  # still usable
    finally:
        links.close()
