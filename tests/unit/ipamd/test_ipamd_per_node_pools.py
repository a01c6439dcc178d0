# SPDX-License-Identifier: Apache-2.0
"""Per-node rail pools (Spiderpool's RoCE guide, Solution 2) in the allocator:
the guide's pools load as written, a wildcard network is expanded, and
matchMasterSubnet picks the pool holding the PF's address on the node."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipamd import pool_admin
from ipamd.allocator import AllocateRequest, AllocState
from ipamd.errors import Conflict, NotFound
from ipamd.manifest import parse_manifest
from ipamd.pools import PoolError, pool_from_spec
from ipamd.store import Snapshot

GUIDE = Path(__file__).resolve().parents[2] / "fixtures" / "roce-solution2"


def guide_state() -> AllocState:
    st = AllocState(Snapshot(), clock=lambda: 1000.0)
    text = "---\n".join(p.read_text() for p in sorted(GUIDE.glob("pools-*.yaml")))
    pools, reserved = parse_manifest(text)
    pool_admin.apply_pools(st, pools, reserved)
    return st


def rail_request(
    rail: int, master_addresses: tuple[str, ...], node: str = "node1", cid: str = "c1"
) -> AllocateRequest:
    return AllocateRequest(
        network=f"sriov-eno3np{rail}",
        container_id=cid,
        ifname=f"net{rail}",
        node=node,
        ipv4_pools=(f"eno3np{rail}-rail{rail}*",),
        match_master_subnet=True,
        master=f"eno3np{rail}",
        master_addresses=master_addresses,
    )


def test_the_guides_pools_load_as_written_ranges_read_to_the_end_of_their_block() -> (
    None
):
    st = guide_state()
    assert len(st.pools) == 16
    rail1 = st.pools["eno3np1-rail1-node1"]
    # "172.16.1.2-172.16.1.32": .32 is the next block's; .31 the broadcast
    assert [str(rail1.address(i)) for i in rail1.usable[0]] == [
        "172.16.1.2",
        "172.16.1.30",
    ]
    rail8 = st.pools["eno3np8-rail8-node2"]  # "172.16.2.226-172.16.2.256"
    assert str(rail8.address(rail8.usable[0][1])) == "172.16.2.254"
    assert [(str(r.dst), str(r.gw)) for r in rail1.routes] == [
        ("172.16.0.0/16", "172.16.1.1")
    ]


def test_a_range_end_elsewhere_outside_the_subnet_is_still_refused() -> None:
    spec = {"subnet": "172.16.1.0/27", "ips": ["172.16.1.2-172.16.1.33"]}
    with pytest.raises(PoolError, match="not pertains to the 'spec.subnet'"):
        pool_from_spec("p", spec)


def test_match_master_subnet_takes_the_pool_holding_the_pfs_address() -> None:
    st = guide_state()
    one, _ = st.allocate(rail_request(1, ("172.16.1.30/27",)))
    two, _ = st.allocate(rail_request(1, ("172.16.2.30/27",), "node2", "c2"))
    three, _ = st.allocate(rail_request(3, ("172.16.2.94/27",), "node2", "c2"))
    assert [(x.pool.name, x.address) for x in (*one, *two, *three)] == [
        ("eno3np1-rail1-node1", "172.16.1.2/27"),
        ("eno3np1-rail1-node2", "172.16.2.2/27"),
        ("eno3np3-rail3-node2", "172.16.2.66/27"),
    ]


def test_no_pool_holding_the_masters_subnet_names_node_master_and_candidates() -> None:
    st = guide_state()
    with pytest.raises(NotFound) as err:
        st.allocate(rail_request(2, ("10.0.0.5/24",), "node3"))
    assert str(err.value) == (
        "matchMasterSubnet: no candidate IPPool holds the master's subnet "
        "(node 'node3', master eno3np2 has 10.0.0.5); candidates: "
        "eno3np2-rail2-node1 (172.16.1.32/27), eno3np2-rail2-node2 (172.16.2.32/27)"
    )
    with pytest.raises(NotFound, match="master eno3np2 has no IPv4 address"):
        st.allocate(rail_request(2, ()))


def test_several_pools_holding_the_masters_subnet_is_an_error_naming_them() -> None:
    st = guide_state()
    with pytest.raises(Conflict) as err:
        st.allocate(rail_request(1, ("172.16.1.30/27", "172.16.2.30/27")))
    assert "eno3np1-rail1-node1, eno3np1-rail1-node2" in str(err.value)
    assert "node 'node1', master eno3np1" in str(err.value)


def test_a_wildcard_matching_no_pool_for_the_node_is_an_error_naming_the_node() -> None:
    st = guide_state()
    req = AllocateRequest(
        network="n", container_id="c", ifname="net1", node="node1",
        ipv4_pools=("eno9*",),
    )  # fmt: skip
    with pytest.raises(NotFound, match="no IPv4 IPPool matching 'eno9\\*'"):
        st.allocate(req)


def test_a_wildcard_skips_pools_pinned_to_other_nodes() -> None:
    st = AllocState(Snapshot(), clock=lambda: 1000.0)
    doc = (
        "apiVersion: spiderpool.spidernet.io/v2beta1\nkind: SpiderIPPool\n"
        "metadata: {name: r1-%s}\nspec: {subnet: %s, ips: [%s], nodeName: [%s]}\n"
    )
    text = "---\n".join(
        (
            doc % ("a", "10.1.0.0/24", "10.1.0.1-10.1.0.9", "node1"),
            doc % ("b", "10.2.0.0/24", "10.2.0.1-10.2.0.9", "node2"),
        )
    )
    pool_admin.apply_pools(st, *parse_manifest(text))
    req = AllocateRequest(
        network="n", container_id="c", ifname="net1", node="node2",
        ipv4_pools=("r1-*",),
    )  # fmt: skip
    leases, _ = st.allocate(req)
    assert [x.address for x in leases] == ["10.2.0.1/24"]
    with pytest.raises(NotFound, match="r1-a nodeName \\['node1'\\] excludes"):
        st.allocate(
            AllocateRequest(
                network="n",
                container_id="d",
                ifname="net1",
                node="node3",
                ipv4_pools=("r1-*",),
            )  # fmt: skip
        )


@pytest.mark.parametrize(
    "affinity",
    [
        {"matchLabels": {"kubernetes.io/hostname": "node2"}},
        {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In",
                 "values": ["node2", "node3"]}
            ]
        },
    ],
)  # fmt: skip
def test_a_node_affinity_naming_hostnames_pins_the_pool_to_those_nodes(
    affinity: dict,
) -> None:
    pool = pool_from_spec(
        "r1-node2",
        {
            "subnet": "10.2.0.0/24",
            "ips": ["10.2.0.1-10.2.0.9"],
            "nodeAffinity": affinity,
        },
    )
    assert "node2" in pool.node_name and "node1" not in pool.node_name


def test_a_node_affinity_on_other_labels_is_still_refused() -> None:
    with pytest.raises(PoolError, match="nodeAffinity.*not supported"):
        pool_from_spec(
            "p",
            {"subnet": "10.2.0.0/24", "ips": ["10.2.0.1"],
             "nodeAffinity": {"matchLabels": {"rail": "1"}}},
        )  # fmt: skip
