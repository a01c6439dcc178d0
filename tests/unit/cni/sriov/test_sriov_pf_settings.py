# SPDX-License-Identifier: Apache-2.0
"""PF-side VF settings: sriov-cni's order and messages, and a complete undo."""

from __future__ import annotations

import pytest

from cni.attach.pf import apply_pf_settings, restore_pf_settings
from cni.errors import DEVICE_ERROR, CniError
from cni.kernel import DeviceBusy, NotSupported, VfInfo
from cni.record.vf import PfSettings
from cni.rollback import Rollback
from tests.doubles.fake_vf import FakeVfOps

ORIG = VfInfo(vf=3, mac="00:00:00:00:00:00", spoofchk=True, trust=False)
WANT = PfSettings(
    mac="02:00:00:00:00:01",
    vlan=10,
    qos=1,
    spoofchk=False,
    trust=True,
    link_state=2,
    min_tx_rate=5,
    max_tx_rate=50,
)


def ops() -> FakeVfOps:
    return FakeVfOps(table={("pf0", 3): ORIG})


def test_settings_are_applied_in_sriov_cni_order() -> None:
    vf = ops()
    rb = Rollback()
    apply_pf_settings(vf, "pf0", 3, WANT, ORIG, rb)
    rb.commit()
    assert vf.journal == [
        "set_vlan",
        "set_mac",
        "set_rate",
        "set_spoofchk",
        "set_trust",
        "set_link_state",
    ]
    got = vf.get_vf("pf0", 3)
    assert (got.vlan, got.qos, got.mac, got.trust, got.link_state) == (
        10,
        1,
        "02:00:00:00:00:01",
        True,
        2,
    )


def test_unset_settings_are_not_touched() -> None:
    vf = ops()
    rb = Rollback()
    apply_pf_settings(vf, "pf0", 3, PfSettings(trust=True), ORIG, rb)
    rb.commit()
    assert vf.journal == ["set_trust"]


@pytest.mark.parametrize(
    ("op", "msg"),
    [
        (
            "set_vlan",
            "failed to set vf 3 vlan configuration - id 10, qos 1 and proto 802.1q",
        ),
        ("set_mac", "failed to set MAC address to 02:00:00:00:00:01"),
        (
            "set_rate",
            "failed to set vf 3 min_tx_rate to 5 Mbps: max_tx_rate to 50 Mbps",
        ),
        ("set_spoofchk", "failed to set vf 3 spoofchk flag to off"),
        ("set_trust", "failed to set vf 3 trust flag to on"),
        ("set_link_state", "failed to set vf 3 link state to 2"),
    ],
)
def test_failure_half_way_restores_every_setting_sriov_cni_119(
    op: str, msg: str
) -> None:
    vf = ops()
    vf.fail[op] = NotSupported("operation not supported")
    with pytest.raises(CniError) as info, Rollback() as rb:
        apply_pf_settings(vf, "pf0", 3, WANT, ORIG, rb)
    assert info.value.code == DEVICE_ERROR
    assert msg in info.value.details
    assert vf.get_vf("pf0", 3) == ORIG


def test_del_restores_only_what_add_set_newest_first() -> None:
    vf = ops()
    rb = Rollback()
    apply_pf_settings(vf, "pf0", 3, PfSettings(vlan=10, trust=True), ORIG, rb)
    rb.commit()
    vf.journal.clear()
    assert (
        restore_pf_settings(vf, "pf0", 3, PfSettings(vlan=10, trust=True), ORIG) == []
    )
    assert vf.journal == ["set_trust", "set_vlan"]
    assert vf.get_vf("pf0", 3) == ORIG


def test_del_tries_every_setting_and_reports_the_failures() -> None:
    vf = ops()
    vf.fail["set_trust"] = DeviceBusy("busy")
    failures = restore_pf_settings(vf, "pf0", 3, WANT, ORIG)
    assert len(failures) == 1 and "trust" in failures[0]
    assert "set_vlan" in vf.journal and "set_link_state" in vf.journal


def test_a_setting_the_device_does_not_support_needs_no_restore() -> None:
    # Refused with EOPNOTSUPP now, so never changed by ADD either: reporting
    # it would keep a record whose DEL fails the same way forever.
    vf = ops()
    vf.fail["set_trust"] = NotSupported("nope")
    assert restore_pf_settings(vf, "pf0", 3, WANT, ORIG) == []
