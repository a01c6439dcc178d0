# SPDX-License-Identifier: Apache-2.0
"""ib-sriov netconf validation: GUID, pkey, link_state, dhcp, ibKubernetes gate."""

from __future__ import annotations

from typing import Any

import pytest

from cni.args import parse_cni_args
from cni.errors import DECODE_FAILURE, INVALID_CONFIG, CniError
from cni.plugins.ib_sriov.config import parse_conf, validate_guid, validate_pkey

VF = "0000:3b:00.2"
GUID = "02:00:00:00:00:00:00:01"


def conf(**extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "ib1",
        "type": "ib-sriov",
        "deviceID": VF,
        **extra,
    }


def config_error(data: dict[str, Any], cni_args: str = "") -> CniError:
    with pytest.raises(CniError) as info:
        parse_conf(data, parse_cni_args(cni_args) if cni_args else None)
    return info.value


# ------------------------------------------------------------------- GUID


def test_guid_from_runtime_config_wins_over_args_cni() -> None:
    c = conf(
        runtimeConfig={"infinibandGUID": GUID.upper()},
        args={"cni": {"guid": "02:00:00:00:00:00:00:09"}},
    )
    assert parse_conf(c).guid == GUID


def test_guid_from_args_cni_when_no_runtime_config() -> None:
    assert parse_conf(conf(args={"cni": {"guid": GUID}})).guid == GUID


def test_top_level_guid_key_is_ignored_as_by_the_peer() -> None:
    assert parse_conf(conf(guid=GUID)).guid == ""


@pytest.mark.parametrize(
    "bad",
    [
        "02:00:00:00:00:00:01",  # 7 bytes
        "02:00:00:00:00:00:00:00:01",  # 9 bytes
        "02-00-00-00-00-00-00-01",
        "0g:00:00:00:00:00:00:01",
        "00:00:00:00:00:00:00:00",  # all zero
    ],
)
def test_invalid_guids_are_refused_with_the_peers_message(bad: str) -> None:
    err = config_error(conf(runtimeConfig={"infinibandGUID": bad}))
    assert err.code == INVALID_CONFIG
    assert err.msg == f"invalid guid {bad}"


def test_validate_guid_normalises_to_lower_case() -> None:
    assert validate_guid("02:AB:00:00:00:00:00:01") == "02:ab:00:00:00:00:00:01"


# ------------------------------------------------------------------- pkey


@pytest.mark.parametrize(
    "raw,norm",
    [
        ("0x7fff", "0x7fff"),
        ("7fff", "0x7fff"),
        ("0X0a", "0x000a"),
        ("1", "0x0001"),
    ],
)
def test_pkeys_with_or_without_0x_are_normalised(raw: str, norm: str) -> None:
    assert validate_pkey(raw) == norm
    assert parse_conf(conf(pkey=raw)).pkey == norm


@pytest.mark.parametrize("bad", ["0x8000", "0xffff", "0", "0x", "0x12345", "zz", "-1"])
def test_pkeys_outside_15_bits_or_not_hex_are_refused(bad: str) -> None:
    err = config_error(conf(pkey=bad))
    assert err.code == INVALID_CONFIG
    assert err.msg == f"invalid pkey {bad}"


def test_a_non_string_pkey_is_a_decode_error() -> None:
    err = config_error(conf(pkey=0x7FFF))
    assert err.code == DECODE_FAILURE
    assert "field pkey of type string" in err.details


def test_no_pkey_is_fine() -> None:
    assert parse_conf(conf()).pkey == ""


# ------------------------------------------------------------ other keys


def test_dhcp_ipam_is_rejected_as_the_peer_does() -> None:
    err = config_error(conf(ipam={"type": "dhcp"}))
    assert err.msg == "ipam type dhcp is not supported"


def test_link_state_values_and_the_peers_error() -> None:
    assert parse_conf(conf(link_state="enable")).link_state == 1
    assert parse_conf(conf()).link_state is None
    err = config_error(conf(link_state="up"))
    assert err.msg == "LoadConf(): invalid link_state value: up"


def test_device_id_is_required_and_must_be_pci() -> None:
    data = conf()
    del data["deviceID"]
    assert config_error(data).msg == "LoadConf(): VF pci addr is required"
    assert parse_conf(data, require_device=False).device_id == ""
    assert "invalid PCI address" in config_error(conf(deviceID="mlx5_0")).msg


def test_rdma_isolation_defaults_off_and_spiderpool_true_is_read() -> None:
    assert parse_conf(conf()).rdma_isolation is False
    assert parse_conf(conf(rdmaIsolation=True)).rdma_isolation is True


def test_ib_kubernetes_requires_the_configured_annotation() -> None:
    err = config_error(
        conf(ibKubernetesEnabled=True, runtimeConfig={"infinibandGUID": GUID})
    )
    assert err.msg == (
        'infiniBand SRIOV-CNI failed, InfiniBand status "mellanox.infiniband.app" '
        'is not "configured" please check mellanox ib-kubernetes'
    )


def test_ib_kubernetes_requires_a_guid() -> None:
    err = config_error(
        conf(
            ibKubernetesEnabled=True,
            args={"cni": {"mellanox.infiniband.app": "configured"}},
        )
    )
    assert err.msg == (
        "infiniband SRIOV-CNI failed, Unexpected error. GUID must be provided by "
        "ib-kubernetes"
    )


def test_ib_kubernetes_configured_with_guid_passes() -> None:
    c = parse_conf(
        conf(
            ibKubernetesEnabled=True,
            args={"cni": {"mellanox.infiniband.app": "configured", "guid": GUID}},
        )
    )
    assert c.ib_kubernetes and c.guid == GUID


def test_guid_from_cni_args_is_the_last_fallback() -> None:
    c = parse_conf(conf(), parse_cni_args(f"IgnoreUnknown=1;GUID={GUID}"))
    assert c.guid == GUID


def test_railyard_shared_keys_are_read() -> None:
    c = parse_conf(
        conf(
            mtu=2044,
            detectIPConflict=False,
            routeTable=1001,
            rulePriority=500,
            podDefaultRouteNIC="net1",
        )
    )
    assert (c.mtu, c.detect_ip_conflict, c.route_table, c.rule_priority) == (
        2044,
        False,
        1001,
        500,
    )
    assert config_error(conf(routeTable=254)).code == INVALID_CONFIG
    assert config_error(conf(mtu=0)).code == INVALID_CONFIG
