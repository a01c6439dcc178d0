# SPDX-License-Identifier: Apache-2.0
"""cni.types: reading results of every version, writing each supported one."""

from __future__ import annotations

import ipaddress
import json

import pytest

from cni.errors import CniError
from cni.types import DNS, Interface, IPConfig, NetConf, Result, Route
from cni.version import ALL, READABLE

FULL_1_1 = {
    "cniVersion": "1.1.0",
    "interfaces": [
        {
            "name": "net1",
            "mac": "02:00:00:00:00:01",
            "mtu": 9000,
            "sandbox": "/var/run/netns/p1",
            "socketPath": "/run/vhost.sock",
            "pciID": "0000:3b:02.1",
        }
    ],
    "ips": [
        {"interface": 0, "address": "172.16.11.5/24", "gateway": "172.16.11.254"},
        {"interface": 0, "address": "fd00:11::5/64", "gateway": "fd00:11::fe"},
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0",
            "gw": "172.16.11.254",
            "mtu": 9000,
            "advmss": 8960,
            "priority": 100,
            "table": 101,
            "scope": 0,
        },
        {"dst": "172.16.0.0/16"},
    ],
    "dns": {
        "nameservers": ["10.96.0.10"],
        "domain": "cluster.local",
        "search": ["default.svc.cluster.local"],
        "options": ["ndots:5"],
    },
}


def full() -> Result:
    return Result.from_json(FULL_1_1)


def test_1_1_0_result_round_trips_exactly():
    assert full().to_json("1.1.0") == FULL_1_1


def test_json_key_order_matches_go_encoding():
    out = full().to_json("1.1.0")
    assert list(out) == ["cniVersion", "interfaces", "ips", "routes", "dns"]
    assert list(out["interfaces"][0]) == [
        "name",
        "mac",
        "mtu",
        "sandbox",
        "socketPath",
        "pciID",
    ]
    assert list(out["ips"][0]) == ["interface", "address", "gateway"]
    assert list(full().to_json("0.4.0")["ips"][0]) == [
        "version",
        "interface",
        "address",
        "gateway",
    ]


@pytest.mark.parametrize("version", ["0.3.0", "0.3.1", "0.4.0"])
def test_0_3_and_0_4_results_carry_the_ip_version_as_a_string(version):
    out = full().to_json(version)
    assert [ip["version"] for ip in out["ips"]] == ["4", "6"]


@pytest.mark.parametrize("version", ["1.0.0", "1.1.0"])
def test_1_x_results_have_no_ip_version_field(version):
    assert all("version" not in ip for ip in full().to_json(version)["ips"])


@pytest.mark.parametrize("version", [v for v in ALL if v != "1.1.0"])
def test_1_1_0_fields_are_dropped_for_older_versions(version):
    out = full().to_json(version)
    assert out["routes"][0] == {"dst": "0.0.0.0/0", "gw": "172.16.11.254"}
    assert "socketPath" not in out["interfaces"][0]
    assert "pciID" not in out["interfaces"][0]


@pytest.mark.parametrize("version", ALL)
def test_interface_mtu_is_a_1_1_0_field(version):
    has_mtu = "mtu" in full().to_json(version)["interfaces"][0]
    assert has_mtu is (version == "1.1.0")


@pytest.mark.parametrize("version", ALL)
def test_every_version_keeps_addresses_gateways_interfaces_and_dns(version):
    out = full().to_json(version)
    assert out["cniVersion"] == version
    assert [ip["address"] for ip in out["ips"]] == ["172.16.11.5/24", "fd00:11::5/64"]
    assert [ip["gateway"] for ip in out["ips"]] == ["172.16.11.254", "fd00:11::fe"]
    assert out["interfaces"][0]["mac"] == "02:00:00:00:00:01"
    assert out["interfaces"][0]["sandbox"] == "/var/run/netns/p1"
    assert out["dns"] == FULL_1_1["dns"]


@pytest.mark.parametrize("source", ALL)
@pytest.mark.parametrize("target", ALL)
def test_conversion_between_any_two_versions_keeps_what_both_can_carry(source, target):
    converted = Result.from_json(full().to_json(source)).to_json(target)
    assert converted["cniVersion"] == target
    assert [ip["address"] for ip in converted["ips"]] == [
        "172.16.11.5/24",
        "fd00:11::5/64",
    ]
    assert [ip["interface"] for ip in converted["ips"]] == [0, 0]
    assert converted["dns"] == FULL_1_1["dns"]
    both = {source, target}
    assert ("table" in converted["routes"][0]) is (both == {"1.1.0"})
    assert ("mtu" in converted["interfaces"][0]) is (both == {"1.1.0"})


@pytest.mark.parametrize("version", ALL)
def test_empty_result_prints_version_and_empty_dns_only(version):
    assert Result().to_json(version) == {"cniVersion": version, "dns": {}}


def test_to_json_defaults_to_the_results_own_version():
    assert Result(cni_version="0.4.0").to_json()["cniVersion"] == "0.4.0"


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", "1.2.0"])
def test_writing_an_unsupported_version_is_code_1(version):
    with pytest.raises(CniError) as e:
        full().to_json(version)
    assert e.value.code == 1


def test_convert_returns_a_result_at_the_new_version():
    old = full().convert("0.3.1")
    assert old.cni_version == "0.3.1"
    assert old.routes[0].table is None
    assert old.interfaces[0].mtu == 0


# ------------------------------------------------------------ reading


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
def test_legacy_ip4_ip6_results_are_upgraded(version):
    legacy = {
        "cniVersion": version,
        "ip4": {
            "ip": "10.1.0.5/16",
            "gateway": "10.1.0.1",
            "routes": [{"dst": "0.0.0.0/0"}],
        },
        "ip6": {"ip": "fd00::5/64", "routes": [{"dst": "::/0", "gw": "fd00::1"}]},
        "dns": {"nameservers": ["10.1.0.1"]},
    }
    res = Result.from_json(legacy)
    assert res.cni_version == version
    assert [str(i.address) for i in res.ips] == ["10.1.0.5/16", "fd00::5/64"]
    assert res.ips[0].gateway == ipaddress.ip_address("10.1.0.1")
    assert res.ips[1].gateway is None
    assert [str(r.dst) for r in res.routes] == ["0.0.0.0/0", "::/0"]
    assert res.dns.nameservers == ["10.1.0.1"]
    assert res.to_json("0.3.1")["ips"][0]["version"] == "4"


@pytest.mark.parametrize("version", ["0.3.0", "0.3.1", "0.4.0"])
def test_0_3_and_0_4_results_are_read_ignoring_the_version_field(version):
    obj = {
        "cniVersion": version,
        "interfaces": [{"name": "eth0", "sandbox": "/proc/1/ns/net"}],
        "ips": [{"version": "4", "interface": 0, "address": "10.0.0.2/24"}],
    }
    res = Result.from_json(obj)
    assert res.ips[0].version == 4
    assert res.ips[0].interface == 0
    assert res.to_json("1.0.0")["ips"] == [{"interface": 0, "address": "10.0.0.2/24"}]


def test_missing_result_version_uses_the_default_given():
    res = Result.from_json({"ips": [{"address": "10.0.0.2/24"}]}, "0.4.0")
    assert res.cni_version == "0.4.0"


def test_result_without_any_version_is_read_as_0_1_0():
    assert Result.from_json({}).cni_version == "0.1.0"


def test_address_keeps_host_bits_and_route_dst_is_a_network():
    res = Result.from_json(
        {
            "cniVersion": "1.0.0",
            "ips": [{"address": "10.0.0.2/24"}],
            "routes": [{"dst": "10.1.2.3/16"}],
        }
    )
    assert res.ips[0].address == ipaddress.ip_interface("10.0.0.2/24")
    assert res.routes[0].dst == ipaddress.ip_network("10.1.0.0/16")


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"cniVersion": 1},
        {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2"}]},
        {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.300/24"}]},
        {"cniVersion": "1.0.0", "ips": [{"gateway": "10.0.0.1"}]},
        {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24", "gateway": "x"}]},
        {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24", "interface": "0"}]},
        {"cniVersion": "1.0.0", "ips": {"address": "10.0.0.2/24"}},
        {"cniVersion": "1.0.0", "routes": [{"gw": "10.0.0.1"}]},
        {"cniVersion": "1.1.0", "routes": [{"dst": "0.0.0.0/0", "table": "main"}]},
        {"cniVersion": "1.0.0", "interfaces": [{"name": 1}]},
        {"cniVersion": "1.0.0", "interfaces": ["net1"]},
        {"cniVersion": "1.0.0", "dns": {"nameservers": "10.0.0.1"}},
        {"cniVersion": "0.2.0", "ip4": {"gateway": "10.0.0.1"}},
    ],
)
def test_malformed_results_are_code_6(bad):
    with pytest.raises(CniError) as e:
        Result.from_json(bad)
    assert e.value.code == 6


def test_unknown_result_version_is_code_1():
    with pytest.raises(CniError) as e:
        Result.from_json({"cniVersion": "9.9.9"})
    assert e.value.code == 1


def test_readable_versions_include_all_writable_ones():
    assert set(ALL) <= set(READABLE)
    assert {"0.1.0", "0.2.0"} <= set(READABLE)


def test_records_are_built_from_ipaddress_types():
    r = Result(
        interfaces=[Interface("net1")],
        ips=[IPConfig(ipaddress.ip_interface("fd00::2/64"))],
        routes=[Route(ipaddress.ip_network("::/0"), ipaddress.ip_address("fd00::1"))],
        dns=DNS(nameservers=["fd00::53"]),
    )
    out = json.loads(json.dumps(r.to_json("1.0.0")))
    assert out == {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "net1"}],
        "ips": [{"address": "fd00::2/64"}],
        "routes": [{"dst": "::/0", "gw": "fd00::1"}],
        "dns": {"nameservers": ["fd00::53"]},
    }


# ----------------------------------------------------------------- NetConf


def test_netconf_reads_the_common_fields():
    conf = NetConf.from_dict(
        {
            "cniVersion": "1.0.0",
            "name": "rail1",
            "type": "sriov",
            "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"},
            "dns": {"nameservers": ["10.0.0.53"]},
            "runtimeConfig": {"mac": "02:00:00:00:00:09"},
            "args": {"cni": {"ips": ["10.0.0.9/24"]}},
            "prevResult": FULL_1_1 | {"cniVersion": "1.0.0"},
            "logLevel": "debug",
            "logFile": "/var/log/sriov.log",
            "capabilities": {"mac": True},
            "deviceID": "0000:3b:02.1",
        }
    )
    assert (conf.cni_version, conf.name, conf.type) == ("1.0.0", "rail1", "sriov")
    assert conf.ipam_type == "host-local"
    assert conf.dns.nameservers == ["10.0.0.53"]
    assert conf.runtime_config == {"mac": "02:00:00:00:00:09"}
    assert conf.args == {"cni": {"ips": ["10.0.0.9/24"]}}
    assert conf.prev_result is not None
    assert conf.prev_result.cni_version == "1.0.0"
    assert conf.raw_prev_result is not None
    assert (conf.log_level, conf.log_file) == ("debug", "/var/log/sriov.log")
    assert conf.capabilities == {"mac": True}
    assert conf.raw["deviceID"] == "0000:3b:02.1"


def test_prev_result_without_version_is_parsed_at_the_config_version():
    conf = NetConf.from_dict(
        {
            "cniVersion": "0.4.0",
            "name": "n",
            "type": "rdma",
            "prevResult": {"ips": [{"version": "4", "address": "10.0.0.2/24"}]},
        }
    )
    assert conf.prev_result is not None
    assert conf.prev_result.cni_version == "0.4.0"


def test_netconf_defaults_when_optional_fields_are_absent():
    conf = NetConf.from_dict({"name": "n"})
    assert conf.cni_version == "0.1.0"
    assert conf.ipam == {} and conf.ipam_type == ""
    assert conf.prev_result is None and conf.raw_prev_result is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("name", 3),
        ("type", ["sriov"]),
        ("ipam", "host-local"),
        ("runtimeConfig", []),
        ("args", "x"),
        ("logLevel", 1),
        ("capabilities", {"mac": "yes"}),
        ("prevResult", "x"),
    ],
)
def test_netconf_with_a_wrongly_typed_common_field_is_code_6_naming_it(key, value):
    # Go's json.Unmarshal fails on a type mismatch: a decode error, as for
    # every netconf key (cni.netconf_fields).
    with pytest.raises(CniError) as e:
        NetConf.from_dict({"cniVersion": "1.0.0", "name": "n", key: value})
    assert e.value.code == 6
    assert key.split(".")[0] in e.value.details


def test_netconf_with_a_malformed_prev_result_is_code_6():
    with pytest.raises(CniError) as e:
        NetConf.from_dict(
            {"cniVersion": "1.0.0", "name": "n", "prevResult": {"ips": [{}]}}
        )
    assert e.value.code == 6
