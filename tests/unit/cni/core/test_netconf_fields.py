# SPDX-License-Identifier: Apache-2.0
"""Netconf values the kernel must never see: huge rates, values with a newline.

Through the plugins' own ``load_conf`` (sriov, ib-sriov), every way the value
can arrive; each refusal is code 7 naming the field and the allowed range or
form.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cni import netconf_fields as fields
from cni.errors import INVALID_CONFIG, CniError
from cni.plugins.ib_sriov.config import load_conf as load_ib
from cni.plugins.sriov.config import load_conf as load_sriov
from cni.skel import CmdArgs

MAC = "02:00:00:00:00:01"
GUID = "02:00:00:00:00:00:00:01"


def sriov(**extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "rail1",
        "type": "sriov",
        "deviceID": "0000:af:00.2",
        **extra,
    }


def ib(**extra: Any) -> dict[str, Any]:
    return {**sriov(**extra), "type": "ib-sriov"}


def add_args(data: dict[str, Any], cni_args: str = "") -> CmdArgs:
    """An ADD's arguments (``load_conf(args)``, the plugin shape)."""
    return CmdArgs(
        command="ADD",
        stdin_data=json.dumps(data).encode(),
        netconf=data,
        args=cni_args,
    )


def refused(load: Any, data: dict[str, Any], cni_args: str = "") -> CniError:
    with pytest.raises(CniError) as info:
        load(add_args(data, cni_args))
    assert info.value.code == INVALID_CONFIG
    return info.value


@pytest.mark.parametrize("key", ["min_tx_rate", "max_tx_rate"])
@pytest.mark.parametrize("value", [10**100, 2**32, -1])
def test_tx_rates_outside_u32_mbps_are_refused_with_the_range(key, value) -> None:
    err = refused(load_sriov, sriov(**{key: value}))
    assert key in err.msg and "must be 0-4294967295 Mbps" in err.msg
    assert len(err.msg) < 120  # a 101-digit number is not echoed back


@pytest.mark.parametrize("key", ["min_tx_rate", "max_tx_rate"])
def test_tx_rates_up_to_u32_are_kept(key) -> None:
    nc = load_sriov(add_args(sriov(**{key: 2**32 - 1})))
    assert getattr(nc, key) == 2**32 - 1


@pytest.mark.parametrize(
    ("where", "data", "cni_args"),
    [
        ("netconf mac", {"mac": MAC + "\n"}, ""),
        ("runtimeConfig.mac", {"runtimeConfig": {"mac": MAC + "\n"}}, ""),
        ("args.cni.mac", {"args": {"cni": {"mac": MAC + "\n"}}}, ""),
        ("CNI_ARGS MAC", {}, f"MAC={MAC}\n"),
    ],
)
def test_a_mac_ending_in_a_newline_is_refused(where, data, cni_args) -> None:
    err = refused(load_sriov, sriov(**data), cni_args)
    assert err.msg == f"failed to parse MAC address {MAC + chr(10)!r}", where
    assert "xx:xx:xx:xx:xx:xx" in err.details


@pytest.mark.parametrize(
    ("data", "cni_args"),
    [
        ({"runtimeConfig": {"infinibandGUID": GUID + "\n"}}, ""),
        ({"args": {"cni": {"guid": GUID + "\n"}}}, ""),
        ({}, f"GUID={GUID}\n"),
    ],
)
def test_a_guid_ending_in_a_newline_is_refused(data, cni_args) -> None:
    err = refused(load_ib, ib(**data), cni_args)
    assert err.msg == f"invalid guid {GUID + chr(10)!r}"
    assert "guid: expected 8 bytes of colon-separated hex" in err.details


def test_a_pkey_ending_in_a_newline_is_refused() -> None:
    err = refused(load_ib, ib(pkey="0x7fff\n"))
    assert err.msg == "invalid pkey '0x7fff\\n'"
    assert "pkey: expected a hex partition key" in err.details


def test_clean_values_still_pass_and_are_normalised() -> None:
    assert fields.mac("02:AB:00:00:00:01") == "02:ab:00:00:00:01"
    assert fields.guid(GUID.upper()) == GUID
    assert fields.pkey("7FFF") == "0x7fff"
    assert fields.tx_rate(None, "max_tx_rate") is None
