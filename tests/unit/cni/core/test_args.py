# SPDX-License-Identifier: Apache-2.0
"""cni.args: CNI_ARGS with Go LoadArgs semantics, runtimeConfig and args.cni."""

from __future__ import annotations

import pytest

from cni import args
from cni import netconf_fields as fields
from cni.errors import CniError

MULTUS = (
    "IgnoreUnknown=true;K8S_POD_NAMESPACE=ai;K8S_POD_NAME=trainer-0;"
    "K8S_POD_INFRA_CONTAINER_ID=3f2a8c;K8S_POD_UID=9b1e"
)


def test_empty_cni_args_is_all_defaults():
    assert args.parse_cni_args("") == args.CniArgs()


def test_multus_args_are_parsed():
    a = args.parse_cni_args(MULTUS)
    assert a.ignore_unknown is True
    assert (a.k8s_pod_namespace, a.k8s_pod_name) == ("ai", "trainer-0")
    assert (a.k8s_pod_infra_container_id, a.k8s_pod_uid) == ("3f2a8c", "9b1e")


def test_unknown_key_is_code_2_naming_the_pair():
    with pytest.raises(CniError) as e:
        args.parse_cni_args("K8S_POD_NAME=p;FOO=bar;BAZ=1")
    assert e.value.code == 2
    assert e.value.msg == 'ARGS: unknown args ["FOO=bar" "BAZ=1"]'


@pytest.mark.parametrize("flag", ["1", "true", "True", "TRUE"])
def test_ignore_unknown_accepts_go_truthy_values_in_any_position(flag):
    a = args.parse_cni_args(f"FOO=bar;IgnoreUnknown={flag};MAC=02:00:00:00:00:01")
    assert a.unknown == ("FOO=bar",)
    assert a.mac == "02:00:00:00:00:01"


@pytest.mark.parametrize("flag", ["0", "false"])
def test_ignore_unknown_false_still_rejects_unknown_keys(flag):
    with pytest.raises(CniError):
        args.parse_cni_args(f"IgnoreUnknown={flag};FOO=bar")


def test_ignore_unknown_with_a_non_boolean_is_code_2():
    with pytest.raises(CniError) as e:
        args.parse_cni_args("IgnoreUnknown=yes")
    assert e.value.code == 2
    assert e.value.msg == 'ARGS: error parsing value of pair "IgnoreUnknown=yes"'


@pytest.mark.parametrize("raw", ["FOO", "A=b=c", "MAC=1;", ";"])
def test_pair_without_exactly_one_equals_is_code_2(raw):
    with pytest.raises(CniError) as e:
        args.parse_cni_args(raw)
    assert e.value.code == 2
    assert e.value.msg.startswith("ARGS: invalid pair")


def test_keys_are_case_sensitive_like_go_struct_fields():
    with pytest.raises(CniError):
        args.parse_cni_args("mac=02:00:00:00:00:01")


def test_ip_guid_and_mac_keys():
    a = args.parse_cni_args("IP=10.0.0.5/24,fd00::5/64;GUID=02:00:00:00:00:00:00:01")
    assert a.ips == ("10.0.0.5/24", "fd00::5/64")
    assert a.guid == "02:00:00:00:00:00:00:01"


def test_a_plugin_can_narrow_the_known_keys():
    with pytest.raises(CniError):
        args.parse_cni_args("GUID=x", known=frozenset({"IgnoreUnknown", "MAC"}))


def test_runtime_config_capabilities_are_read():
    conf = {
        "runtimeConfig": {
            "mac": "02:00:00:00:00:07",
            "ips": ["10.0.0.7/24"],
            "infinibandGUID": "c2:00:00:00:00:00:00:07",
            "deviceID": "0000:3b:02.7",
        }
    }
    assert fields.runtime_mac(conf) == "02:00:00:00:00:07"
    assert fields.runtime_ips(conf) == ("10.0.0.7/24",)
    assert fields.runtime_infiniband_guid(conf) == "c2:00:00:00:00:00:00:07"
    assert fields.runtime_device_id(conf) == "0000:3b:02.7"


def test_absent_sections_read_as_empty():
    assert fields.runtime_mac({}) == ""
    assert fields.runtime_ips({"runtimeConfig": None}) == ()
    assert fields.args_cni({"args": {}}) == {}
    assert fields.args_cni_ips({}) == ()


@pytest.mark.parametrize(
    "conf",
    [
        {"runtimeConfig": []},
        {"runtimeConfig": {"ips": "10.0.0.1/24"}},
        {"runtimeConfig": {"mac": 1}},
        {"args": {"cni": "ips"}},
        {"args": {"cni": {"ips": [1]}}},
    ],
)
def test_wrongly_typed_capability_args_are_code_6_naming_the_key(conf):
    with pytest.raises(CniError) as e:
        fields.runtime_mac(conf)
        fields.runtime_ips(conf)
        fields.args_cni_ips(conf)
    # A JSON type mismatch reads like Go's json.Unmarshal, as every netconf key.
    assert e.value.code == 6
    assert "runtimeConfig" in e.value.details or "args" in e.value.details


def test_requested_ips_prefer_runtime_config_then_args_cni_then_cni_args():
    cni_args = args.parse_cni_args("IP=10.0.0.3/24")
    both = {
        "runtimeConfig": {"ips": ["10.0.0.1/24"]},
        "args": {"cni": {"ips": ["10.0.0.2/24"]}},
    }
    assert args.requested_ips(both, cni_args) == ("10.0.0.1/24",)
    assert args.requested_ips({"args": both["args"]}, cni_args) == ("10.0.0.2/24",)
    assert args.requested_ips({}, cni_args) == ("10.0.0.3/24",)


def test_requested_mac_and_guid_follow_the_same_precedence():
    cni_args = args.parse_cni_args("MAC=02:00:00:00:00:03;GUID=g3")
    conf = {"args": {"cni": {"mac": "02:00:00:00:00:02", "guid": "g2"}}}
    assert args.requested_mac(conf, cni_args) == "02:00:00:00:00:02"
    assert args.requested_guid(conf, cni_args) == "g2"
    assert args.requested_mac({}, cni_args) == "02:00:00:00:00:03"
    conf["runtimeConfig"] = {"infinibandGUID": "g1", "mac": "02:00:00:00:00:01"}
    assert args.requested_guid(conf, cni_args) == "g1"
    assert args.requested_mac(conf, cni_args) == "02:00:00:00:00:01"
