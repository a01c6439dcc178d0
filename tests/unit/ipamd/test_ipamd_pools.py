# SPDX-License-Identifier: Apache-2.0
"""SpiderIPPool / SpiderReservedIP model, Spiderpool's validation, YAML forms."""

from __future__ import annotations

import ipaddress

import pytest

from ipamd import ranges
from ipamd.manifest import parse_manifest
from ipamd.pools import (
    PoolError,
    check_pool_set,
    pool_from_spec,
    pool_to_spec,
    reserved_from_spec,
)

RAIL = {
    "subnet": "172.16.11.0/24",
    "ips": ["172.16.11.1-172.16.11.200"],
    "gateway": "172.16.11.254",
}


def ip(text: str) -> int:
    return int(ipaddress.ip_address(text))


def test_ranges_are_merged_sorted_and_subtracted() -> None:
    merged = ranges.merge([(10, 20), (1, 3), (4, 5), (18, 25)])
    assert merged == [(1, 5), (10, 25)]
    assert ranges.subtract(merged, [(2, 2), (12, 30)]) == [(1, 1), (3, 5), (10, 11)]
    assert ranges.intersect([(1, 10)], [(5, 6), (9, 12)]) == [(5, 6), (9, 10)]
    assert ranges.contains(merged, 24) and not ranges.contains(merged, 7)
    assert ranges.to_text([(ip("10.0.0.1"), ip("10.0.0.3"))], 4) == [
        "10.0.0.1-10.0.0.3"
    ]


def test_pool_merges_ranges_and_single_ips_and_subtracts_excludes() -> None:
    pool = pool_from_spec(
        "p",
        {
            "subnet": "10.0.0.0/24",
            "ips": ["10.0.0.10", "10.0.0.1-10.0.0.5", "10.0.0.6"],
            "excludeIPs": ["10.0.0.3"],
        },
    )
    assert pool.version == 4
    assert pool.ips_text() == ["10.0.0.1-10.0.0.6", "10.0.0.10"]
    assert ranges.to_text(pool.usable, 4) == [
        "10.0.0.1-10.0.0.2",
        "10.0.0.4-10.0.0.6",
        "10.0.0.10",
    ]


def test_ips_outside_the_subnet_are_refused_with_spiderpools_reason() -> None:
    with pytest.raises(PoolError, match="not pertains to the 'spec.subnet'"):
        pool_from_spec("p", {**RAIL, "ips": ["172.16.12.1-172.16.12.9"]})


def test_gateway_inside_ips_is_refused_unless_excluded() -> None:
    spec = {**RAIL, "ips": ["172.16.11.1-172.16.11.254"]}
    with pytest.raises(PoolError, match="add the gateway IP address to"):
        pool_from_spec("p", spec)
    pool = pool_from_spec("p", {**spec, "excludeIPs": ["172.16.11.254"]})
    assert str(pool.gateway) == "172.16.11.254"


def test_default_route_in_routes_is_refused() -> None:
    with pytest.raises(PoolError, match="default route 0.0.0.0/0 is not allowed"):
        pool_from_spec("p", {**RAIL, "routes": [{"dst": "0.0.0.0/0", "gw": "x"}]})


def test_route_gateway_outside_subnet_and_duplicate_dst_are_refused() -> None:
    with pytest.raises(PoolError, match="route gw 10.1.1.1 not pertains"):
        pool_from_spec(
            "p", {**RAIL, "routes": [{"dst": "10.0.0.0/8", "gw": "10.1.1.1"}]}
        )
    twice = [{"dst": "10.0.0.0/8"}, {"dst": "10.0.0.0/8"}]
    with pytest.raises(PoolError, match="duplicate route dst"):
        pool_from_spec("p", {**RAIL, "routes": twice})


def test_older_doc_form_to_via_routes_are_accepted() -> None:
    pool = pool_from_spec(
        "p", {**RAIL, "routes": [{"to": "10.10.0.0/16", "via": "172.16.11.254"}]}
    )
    assert [(str(r.dst), str(r.gw)) for r in pool.routes] == [
        ("10.10.0.0/16", "172.16.11.254")
    ]


@pytest.mark.parametrize("written", ["IPv4", "4", " 4 "])
def test_ipversion_as_a_string_is_refused_with_the_integer_form(written) -> None:
    # Spiderpool's CRD types ipVersion as an integer.
    with pytest.raises(PoolError, match=r"must be the integer 4 or 6.*write 4"):
        pool_from_spec("p", {**RAIL, "ipVersion": written})


def test_ipversion_written_ipv4_as_the_roce_guide_does_is_read_as_4() -> None:
    assert pool_from_spec("p", {**RAIL, "ipVersion": "ipv4"}).version == 4
    with pytest.raises(PoolError, match="is not an IPv6 subnet"):
        pool_from_spec("p", {**RAIL, "ipVersion": "ipv6"})


@pytest.mark.parametrize("value", [0, 5, -4, True, 4.0, "", [], {}])
def test_ipversion_other_than_4_or_6_is_refused(value) -> None:
    with pytest.raises(PoolError, match="'spec.ipVersion'.*must be the integer 4 or 6"):
        pool_from_spec("p", {**RAIL, "ipVersion": value})


def test_ipversion_absent_follows_the_subnet() -> None:
    v6 = pool_from_spec("q", {"subnet": "fd00::/64", "ips": ["fd00::1-fd00::ff"]})
    assert v6.version == 6
    assert pool_from_spec("p", {**RAIL, "ipVersion": 4}).version == 4


def test_ipversion_contradicting_the_subnet_is_refused() -> None:
    with pytest.raises(PoolError, match="is not an IPv6 subnet"):
        pool_from_spec("p", {**RAIL, "ipVersion": 6})


def test_label_selectors_are_refused_rather_than_ignored() -> None:
    with pytest.raises(PoolError, match="nodeAffinity.*not supported"):
        pool_from_spec("p", {**RAIL, "nodeAffinity": {"matchLabels": {"a": "b"}}})


def test_unknown_spec_field_is_refused() -> None:
    with pytest.raises(PoolError, match="unknown field 'spec.ipps'"):
        pool_from_spec("p", {**RAIL, "ipps": []})


def test_spec_round_trips_through_its_normalized_form() -> None:
    pool = pool_from_spec(
        "p",
        {
            **RAIL,
            "nodeName": ["n1"],
            "default": True,
            "routes": [{"dst": "10.0.0.0/8", "gw": "172.16.11.254"}],
        },
    )
    assert pool_from_spec("p", pool_to_spec(pool)) == pool


def test_overlapping_subnets_of_different_size_are_refused() -> None:
    a = pool_from_spec("a", RAIL)
    b = pool_from_spec("b", {"subnet": "172.16.0.0/16", "ips": ["172.16.200.1"]})
    with pytest.raises(PoolError, match="overlaps with IPPool a"):
        check_pool_set([a, b])


def test_pools_sharing_a_subnet_must_not_share_addresses() -> None:
    a = pool_from_spec("a", RAIL)
    b = pool_from_spec("b", {**RAIL, "ips": ["172.16.11.201-172.16.11.250"]})
    check_pool_set([a, b])
    c = pool_from_spec("c", {**RAIL, "ips": ["172.16.11.200-172.16.11.210"]})
    with pytest.raises(PoolError, match="172.16.11.200 overlaps with IPPool a"):
        check_pool_set([a, c])


def test_reserved_ip_derives_its_version_from_the_ips() -> None:
    res = reserved_from_spec("r", {"ips": ["fd00::5", "fd00::1-fd00::3"]})
    assert res.version == 6
    assert res.ips_text() == ["fd00::1-fd00::3", "fd00::5"]


MANIFEST = """
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata:
  name: gpu1-net11
spec:
  subnet: 172.16.11.0/24
  ips:
    - 172.16.11.1-172.16.11.200
  gateway: 172.16.11.254
---
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderReservedIP
metadata:
  name: keep-out
spec:
  ipVersion: 4
  ips:
    - 172.16.11.10
"""


def test_multi_document_manifest_yields_pools_and_reserved_ips() -> None:
    pools, reserved = parse_manifest(MANIFEST)
    assert [p.name for p in pools] == ["gpu1-net11"]
    assert [r.name for r in reserved] == ["keep-out"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("kind: [unclosed", "malformed YAML"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "apiVersion"),
        (
            "apiVersion: spiderpool.spidernet.io/v2beta1\nkind: SpiderSubnet\n"
            "metadata: {name: x}\nspec: {}\n",
            "unsupported kind",
        ),
        (
            "apiVersion: spiderpool.spidernet.io/v2beta1\nkind: SpiderIPPool\n"
            "spec: {subnet: 10.0.0.0/24, ips: [10.0.0.1]}\n",
            "metadata.name is required",
        ),
        ("", "holds no SpiderIPPool"),
    ],
)
def test_bad_manifests_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(PoolError, match=reason):
        parse_manifest(text)
