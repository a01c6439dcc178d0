# SPDX-License-Identifier: Apache-2.0
"""What "a rail NIC is attached" and "everything is back" mean, checked on the
real kernel state (``ip -j``) and the simulated host's files, for every client.

Imports: standard library and this package.
"""

from __future__ import annotations

import ipaddress
import time

from railyard_sim.lab import RailSpec, VfSpec

from . import netview
from .host import SimHost, netns_identity


def route_table_of(address: str, netns: str) -> str:
    """The policy table of a NIC's address; it must route default via the rail."""
    table = netview.source_rule_table(address, netns)
    assert table is not None, (
        f"no `from {address}` rule in {netns}: {netview.rules(netns)}"
    )
    return table


def assert_rail_nic(
    host: SimHost,
    netns: str,
    ifname: str,
    rail: RailSpec,
    vf: VfSpec,
    mtu: int | None = None,
    rdma: bool = False,
) -> str:
    """``ifname`` in ``netns`` is ``vf`` with an address of ``rail``'s pool,
    policy-routed through the rail's gateway (and with ``rdma``, the VF's RDMA
    device moved into ``netns``); returns the address (CIDR)."""
    nic = netview.nic(ifname, netns)
    assert nic is not None, f"{ifname} not in {netns}: {netview.link_names(netns)}"
    assert nic.up
    assert len(nic.ipv4) == 1, nic
    address = nic.ipv4[0]
    assert ipaddress.ip_interface(address).network == ipaddress.ip_network(
        rail.subnet_v4
    ), f"{address} not in {rail.subnet_v4}"
    if mtu is not None:
        assert nic.mtu == mtu
    table = route_table_of(address, netns)
    default = [r for r in netview.routes(table, netns) if r.get("dst") == "default"]
    assert default and default[0].get("gateway") == rail.gateway_v4, default
    assert default[0].get("dev") == ifname
    assert not host.vf_in_host(vf), f"{vf.netdev} still in the host netns"
    if rdma:
        assert host.rdma_netns(vf) == netns_identity(netns), (
            f"RDMA device {vf.rdma} not in {netns}"
        )
    return address


def assert_allocated(
    host: SimHost, container_id: str, expected: dict[str, str]
) -> None:
    """ipamd holds exactly ``{ifname: address}`` for the container."""
    allocs = host.allocations_of(container_id)
    got = {a["ifname"]: a["address"] for a in allocs}
    assert got == expected, allocs


def assert_all_returned(host: SimHost, within: float = 0) -> None:
    """Every VF and RDMA device is back in the host, and no address is held
    (polled for up to ``within`` s where a runtime finishes DEL asynchronously)."""
    deadline = time.monotonic() + within
    left = host.leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = host.leftovers()
    assert left == [], "\n".join(left)
