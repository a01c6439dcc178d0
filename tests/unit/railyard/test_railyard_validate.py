# SPDX-License-Identifier: Apache-2.0
"""SpiderMultusConfig rules with Spiderpool's messages, and the rendering
choices that depend on annotations and the coordinator block."""

from __future__ import annotations

from typing import Any

import pytest

from railyard import render
from railyard.network import NetworkError, parse
from railyard.validate import validate


def smc(spec: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "spiderpool.spidernet.io/v2beta1",
        "kind": "SpiderMultusConfig",
        "metadata": {"name": "rail1", "namespace": "ai", "annotations": annotations},
        "spec": spec,
    }


def sriov(**fields: Any) -> dict[str, Any]:
    return {
        "cniType": "sriov",
        "sriov": {
            "resourceName": "spidernet.io/rail1",
            "ippools": {"ipv4": ["rail1-v4"]},
            **fields,
        },
    }


def errors(body: dict[str, Any], pf_mtu: int | None = None) -> list[str]:
    return validate(parse(body), pf_mtu=pf_mtu)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"sriov": {"resourceName": "r"}}, "CniType must not be nil"),
        ({"cniType": "sriov"}, "no spec.sriovConfig specified"),
        (
            sriov(vlanID=4095),
            "invalid vlanId 4095, please make sure vlanId in range [0,4094]",
        ),
        (sriov(mtu=-1), "MTU must be greater than or equal to 0"),
        (
            sriov(minTxRateMbps=200, maxTxRateMbps=100),
            "minTxRateMbps must be less than maxTxRateMbps",
        ),
        (sriov(resourceName=""), "no spec.sriovConfig[resourceName] specified"),
        (
            {**sriov(), "macvlan": {"master": ["eth0"]}},
            "the cniType sriov only supports spec.sriovConfig, please remove "
            "other CNI configs",
        ),
        ({"cniType": "ib-sriov"}, "no spec.ibsriovConfig specified"),
        (
            {"cniType": "ib-sriov", "ibsriov": {"pkey": "0x10"}},
            "no spec.ibsriovConfig[resourceName] specified",
        ),
        (
            {"cniType": "ib-sriov", "ibsriov": {"resourceName": "r"}, "sriov": {}},
            "the cniType ib-sriov only supports spec.ibsriovConfig, please remove "
            "other CNI configs",
        ),
        (
            {"cniType": "ib-sriov", "ibsriov": {"resourceName": "r", "pkey": "zz"}},
            "invalid pkey 'zz': a hexadecimal partition key 0x0001..0x7fff",
        ),
        (
            {
                "cniType": "ib-sriov",
                "ibsriov": {"resourceName": "r", "linkState": "on"},
            },
            'spec.ibsriov.linkState: Unsupported value: "on": supported values: '
            '"auto", "enable", "disable"',
        ),
        (
            {**sriov(), "chainCNIJsonData": ['{"mtu": 1}']},
            "invalid {\"mtu\": 1}: a plugin config needs a string 'type'",
        ),
        (
            {**sriov(), "coordinator": {"vethLinkAddress": "not-an-ip"}},
            "vethLinkAddress is an invalid IP address",
        ),
        (
            {"cniType": "macvlan", "macvlan": {"master": ["eth0"]}},
            "cniType macvlan is not one railyard renders (sriov, ib-sriov)",
        ),
    ],
)
def test_spiderpool_rule_and_message(spec: dict[str, Any], message: str) -> None:
    assert message in errors(smc(spec))


def test_a_valid_network_has_no_error() -> None:
    assert (
        errors(smc(sriov(vlanID=100, mtu=4200, minTxRateMbps=10, maxTxRateMbps=100)))
        == []
    )


def test_a_minimum_rate_without_a_maximum_is_refused_as_by_spiderpool() -> None:
    # its webhook defaults maxTxRateMbps to 0 and then compares
    assert errors(smc(sriov(minTxRateMbps=10))) == [
        "minTxRateMbps must be less than maxTxRateMbps"
    ]


def test_mtu_above_the_known_pf_is_refused() -> None:
    assert errors(smc(sriov(mtu=9200)), pf_mtu=9000) == [
        "mtu 9200 is above the MTU of the PF (9000)"
    ]
    assert errors(smc(sriov(mtu=9000)), pf_mtu=9000) == []


@pytest.mark.parametrize(
    ("version", "ok"),
    [("0.3.1", True), ("1.0.0", True), ("1.1.0", True), ("0.2.0", False)],
)
def test_cni_version_annotation(version: str, ok: bool) -> None:
    body = smc(sriov(), **{"multus.spidernet.io/cni-version": version})
    assert (errors(body) == []) is ok
    if ok:
        assert render.conflist(parse(body))["cniVersion"] == version
    else:
        assert errors(body) == [
            f"unsupported CNI version {version} (railyard renders "
            "0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0)"
        ]


@pytest.mark.parametrize("version", ["0.3.1", "1.0.0", "1.1.0"])
def test_spec_cni_version_selects_the_rendered_version(version: str) -> None:
    body = smc(sriov())
    body["spec"]["cniVersion"] = version
    assert errors(body) == []
    assert render.conflist(parse(body))["cniVersion"] == version


def test_rendered_networks_default_to_cni_1_0_0() -> None:
    assert render.conflist(parse(smc(sriov())))["cniVersion"] == "1.0.0"


def test_spec_cni_version_wins_over_the_annotation_and_is_validated() -> None:
    body = smc(sriov(), **{"multus.spidernet.io/cni-version": "0.3.1"})
    body["spec"]["cniVersion"] = "1.1.0"
    assert render.conflist(parse(body))["cniVersion"] == "1.1.0"
    body["spec"]["cniVersion"] = "2.0.0"
    assert errors(body) == [
        "unsupported CNI version 2.0.0 (railyard renders "
        "0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0)"
    ]


def test_custom_nad_name_must_be_a_dns_subdomain() -> None:
    body = smc(sriov(), **{"multus.spidernet.io/cr-name": "Rail_1"})
    (message,) = errors(body)
    assert message.startswith("invalid custom net-attach-def resource name, err: ")


def test_rdma_inject_needs_resource_and_pools() -> None:
    inject = {"cni.spidernet.io/rdma-resource-inject": "g"}
    no_pools = smc(
        {"cniType": "sriov", "sriov": {"resourceName": "spidernet.io/r"}}, **inject
    )
    assert errors(no_pools) == [
        "no any ippools configured for spidermultusconfig ai/rail1"
    ]


def test_inject_group_must_be_usable_as_a_label_value() -> None:
    body = smc(sriov(), **{"cni.spidernet.io/rdma-resource-inject": "rdma network"})
    (message,) = errors(body)
    assert message.startswith(
        "invalid cni.spidernet.io/rdma-resource-inject 'rdma network': the group "
        "becomes a label value"
    )


def test_network_inject_needs_pools_only_with_a_resource() -> None:
    inject = {"cni.spidernet.io/network-resource-inject": "g"}
    body = smc(
        {"cniType": "sriov", "sriov": {"resourceName": "spidernet.io/r"}}, **inject
    )
    assert errors(body) == ["no any ippools configured for spidermultusconfig ai/rail1"]


def test_wrong_types_name_the_field() -> None:
    with pytest.raises(NetworkError, match=r"spec.sriov.mtu must be an integer"):
        parse(smc(sriov(mtu="8000")))
    with pytest.raises(NetworkError, match=r"spec.sriov.enableRdma must be true"):
        parse(smc(sriov(enableRdma="yes")))


def test_names_come_from_the_annotations() -> None:
    net = parse(
        smc(
            sriov(),
            **{
                "multus.spidernet.io/cr-name": "rail-one",
                "cni.spidernet.io/cniconfig-name": "rail-one-conf",
            },
        )
    )
    assert render.nad(net)["metadata"]["name"] == "rail-one"
    assert render.conflist(net)["name"] == "rail-one-conf"


def test_coordinator_settings_become_our_plugin_keys() -> None:
    body = smc(
        {
            **sriov(rdmaIsolation=True, mtu=4200),
            "coordinator": {
                "podDefaultRouteNIC": "net1",
                "tunePodRoutes": False,
                "detectGateway": False,
                "hijackCIDR": ["10.0.0.0/8"],
                "podMACPrefix": "0a:1b",
            },
            "chainCNIJsonData": ['{"type":"sbr"}'],
        }
    )
    net = parse(body)
    plugins = render.conflist(net)["plugins"]
    assert [p["type"] for p in plugins] == ["sriov", "rdma", "sbr", "tuning"]
    main = plugins[0]
    assert main["podDefaultRouteNIC"] == "net1"
    assert main["policyRouting"] is False
    assert main["detectGateway"] is False
    assert "detectIPConflict" not in main  # unset: our plugin's default
    assert main["hijackCIDR"] == ["10.0.0.0/8"]
    assert net.coordinator.ignored == ("podMACPrefix",)


def test_hijack_cidr_entries_must_be_cidrs() -> None:
    body = smc({**sriov(), "coordinator": {"hijackCIDR": ["10.96.0.0/12", "svc"]}})
    assert errors(body) == ["hijackCIDR 'svc' is not a CIDR"]


def test_disabled_coordinator_turns_policy_routing_off() -> None:
    net = parse(smc({**sriov(), "enableCoordinator": False}))
    assert render.conflist(net)["plugins"][0]["policyRouting"] is False


def test_match_master_subnet_under_sriov_is_the_guides_placement() -> None:
    net = parse(smc(sriov(matchMasterSubnet=True)))
    assert render.conflist(net)["plugins"][0]["ipam"] == {
        "type": "spiderpool",
        "default_ipv4_ippool": ["rail1-v4"],
        "match_master_subnet": True,
    }


def test_kubectl_bookkeeping_does_not_leak_onto_the_nad() -> None:
    body = smc(sriov(), **{"kubectl.kubernetes.io/last-applied-configuration": "{...}"})
    nad = render.nad(parse(body))
    assert nad["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/resourceName": "spidernet.io/rail1"
    }
