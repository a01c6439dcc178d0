# SPDX-License-Identifier: Apache-2.0
"""sriov netconf parsing: sriov-cni's fields, defaults and exact messages, plus ours."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cni.args import parse_cni_args
from cni.errors import DECODE_FAILURE, INVALID_CONFIG, CniError
from cni.plugins.sriov.config import DEFAULT_RULE_PRIORITY, parse_conf

PCI = "0000:af:00.2"


def conf(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "gpu1-sriov",
        "type": "sriov",
        "deviceID": PCI,
    }
    base.update(extra)
    return base


def error_of(data: Any, **kw: Any) -> CniError:
    with pytest.raises(CniError) as info:
        parse_conf(json.dumps(data) if not isinstance(data, str) else data, **kw)
    return info.value


def test_missing_device_id_is_rejected_with_sriov_cni_message() -> None:
    data = conf()
    del data["deviceID"]
    err = error_of(data)
    assert (err.code, err.msg) == (
        INVALID_CONFIG,
        "LoadConf(): VF pci addr is required",
    )


def test_missing_device_id_is_accepted_for_del() -> None:
    data = conf()
    del data["deviceID"]
    assert parse_conf(json.dumps(data), require_device=False).device_id == ""


def test_device_id_falls_back_to_the_deviceid_capability() -> None:
    """cnitool's CAP_ARGS and multus' selection element deliver the VF as
    ``runtimeConfig.deviceID``; the top-level key (multus' injection) wins."""
    data = conf(runtimeConfig={"deviceID": "0000:AF:00.3"})
    del data["deviceID"]
    assert parse_conf(json.dumps(data)).device_id == "0000:af:00.3"
    both = conf(runtimeConfig={"deviceID": "0000:af:00.3"})
    assert parse_conf(json.dumps(both)).device_id == PCI


def test_malformed_pci_address_is_rejected() -> None:
    err = error_of(conf(deviceID="af:00.2"))
    assert err.msg == "LoadConf(): invalid PCI address af:00.2"


def test_unparsable_json_is_a_decode_error() -> None:
    err = error_of("{not json")
    assert err.code == DECODE_FAILURE


VLAN_RANGE = "invalid: value must be in the range 0-4094"
NEEDS_VLAN = "LoadConf(): vlan id must be configured to set vlan"
NEEDS_NONZERO = "LoadConf(): non-zero vlan id must be configured to set vlan"


@pytest.mark.parametrize(
    ("extra", "msg"),
    [
        ({"vlan": 4095}, f"LoadConf(): vlan id 4095 {VLAN_RANGE}"),
        ({"vlan": -1}, f"LoadConf(): vlan id -1 {VLAN_RANGE}"),
        ({"vlanQoS": 1}, f"{NEEDS_VLAN} QoS to a non-nil value"),
        ({"vlanProto": "802.1q"}, f"{NEEDS_VLAN} proto to a non-nil value"),
        (
            {"vlan": 10, "vlanQoS": 8},
            "LoadConf(): vlan QoS PCP 8 invalid: value must be in the range 0-7",
        ),
        ({"vlan": 0, "vlanQoS": 3}, f"{NEEDS_NONZERO} QoS to a non-zero value"),
        (
            {"vlan": 10, "vlanProto": "802.1x"},
            "LoadConf(): vlan Proto 802.1x invalid: value must be '802.1Q' or "
            "'802.1ad'",
        ),
        ({"vlan": 0, "vlanProto": "802.1ad"}, f"{NEEDS_NONZERO} proto 802.1ad"),
        ({"link_state": "up"}, "LoadConf(): invalid link_state value: up"),
    ],
)
def test_validation_messages_match_sriov_cni(extra: dict[str, Any], msg: str) -> None:
    err = error_of(conf(**extra))
    assert (err.code, err.msg) == (INVALID_CONFIG, msg)


def test_vlan_defaults_qos_zero_and_proto_8021q() -> None:
    nc = parse_conf(json.dumps(conf(vlan=100)))
    assert (nc.vlan, nc.vlan_qos, nc.vlan_proto, nc.vlan_proto_number) == (
        100,
        0,
        "802.1q",
        0x8100,
    )


def test_vlan_proto_is_lower_cased_and_8021ad_encoded() -> None:
    nc = parse_conf(json.dumps(conf(vlan=100, vlanProto="802.1AD")))
    assert (nc.vlan_proto, nc.vlan_proto_number) == ("802.1ad", 0x88A8)


def test_no_vlan_key_means_vlan_is_left_untouched() -> None:
    nc = parse_conf(json.dumps(conf()))
    assert (nc.vlan, nc.vlan_qos, nc.vlan_proto) == (None, None, None)


def test_spoofchk_and_trust_follow_sriov_cni_on_semantics() -> None:
    nc = parse_conf(json.dumps(conf(spoofchk="on", trust="yes")))
    assert (nc.spoofchk, nc.trust) == (True, False)
    assert parse_conf(json.dumps(conf())).spoofchk is None


def test_link_state_names_map_to_ifla_values() -> None:
    states = [
        parse_conf(json.dumps(conf(link_state=s))).link_state
        for s in ("auto", "enable", "disable")
    ]
    assert states == [0, 1, 2]


def test_runtime_config_mac_wins_over_cni_args_and_netconf() -> None:
    data = conf(mac="02:00:00:00:00:01", runtimeConfig={"mac": "02:00:00:00:00:AA"})
    nc = parse_conf(json.dumps(data), cni_args=parse_cni_args("MAC=02:00:00:00:00:bb"))
    assert nc.mac == "02:00:00:00:00:aa"


def test_cni_args_mac_wins_over_netconf_mac() -> None:
    args = parse_cni_args("IgnoreUnknown=true;MAC=02:00:00:00:00:bb;K8S_POD_NAME=p")
    nc = parse_conf(json.dumps(conf(mac="02:00:00:00:00:01")), cni_args=args)
    assert nc.mac == "02:00:00:00:00:bb"


def test_malformed_mac_fails_before_any_change() -> None:
    err = error_of(conf(mac="02:00:00:00:00"))
    assert err.msg == "failed to parse MAC address 02:00:00:00:00"


def test_non_integer_vlan_is_a_decode_error_like_go_json() -> None:
    err = error_of(conf(vlan="10"))
    assert err.code == DECODE_FAILURE
    assert "field vlan of type int" in err.details


def test_railyard_defaults_detection_on_and_policy_routing_on() -> None:
    nc = parse_conf(json.dumps(conf()))
    assert nc.detect_ip_conflict and nc.detect_gateway and nc.policy_routing
    assert (nc.route_table, nc.rule_priority, nc.mtu) == (
        None,
        DEFAULT_RULE_PRIORITY,
        None,
    )
    assert not nc.rdma_isolation


def test_detection_can_be_switched_off_per_network() -> None:
    nc = parse_conf(json.dumps(conf(detectIPConflict=False, detectGateway=False)))
    assert not nc.detect_ip_conflict and not nc.detect_gateway


def test_enable_rdma_is_the_older_spelling_of_rdma_isolation() -> None:
    assert parse_conf(json.dumps(conf(enableRdma=True))).rdma_isolation
    assert parse_conf(json.dumps(conf(rdmaIsolation=True))).rdma_isolation


@pytest.mark.parametrize("table", [0, 253, 254, 255, -5])
def test_reserved_or_invalid_route_table_is_rejected(table: int) -> None:
    err = error_of(conf(routeTable=table))
    assert err.code == INVALID_CONFIG and err.msg.startswith(
        f"routeTable {table} invalid"
    )


def test_rule_priority_must_come_before_the_main_table() -> None:
    assert error_of(conf(rulePriority=32766)).msg.startswith(
        "rulePriority 32766 invalid"
    )
    assert parse_conf(json.dumps(conf(rulePriority=500))).rule_priority == 500


def test_non_positive_mtu_is_rejected() -> None:
    assert error_of(conf(mtu=0)).msg == "mtu 0 invalid: must be a positive number"


def test_spiderpool_rendered_sriov_plugin_is_accepted_unchanged() -> None:
    # SpiderMultusConfig's rendering plus multus' top-level deviceID/pciBusID.
    data = {
        "cniVersion": "0.3.1",
        "name": "gpu1-sriov",
        "vlan": 0,
        "min_tx_rate": 0,
        "max_tx_rate": 0,
        "type": "sriov",
        "ipam": {"type": "spiderpool", "default_ipv4_ippool": ["gpu1-net11"]},
        "deviceID": PCI,
        "pciBusID": PCI,
    }
    nc = parse_conf(json.dumps(data))
    assert (nc.vlan, nc.vlan_qos, nc.vlan_proto) == (0, 0, "802.1q")
    assert (nc.min_tx_rate, nc.max_tx_rate) == (0, 0)
    assert nc.ipam_type == "spiderpool"
    assert nc.device_id == PCI
