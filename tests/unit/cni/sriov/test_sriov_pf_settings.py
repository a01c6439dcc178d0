# SPDX-License-Identifier: Apache-2.0
"""PF-side VF settings: sriov-cni's order and messages, and a complete undo."""

from __future__ import annotations

import pytest

from cni.attach.pf import apply_pf_settings, restore_pf_settings
from cni.errors import DEVICE_ERROR, CniError
from cni.kernel import DeviceBusy, KernelError, NotSupported, VfInfo
from cni.record.vf import PfSettings
from cni.rollback import Rollback
from tests.doubles.fake_kernel import FakeKernel

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


class Pf:
    """PF ``pf0`` with VF 3 as ``ORIG`` on the fake kernel; ``vf`` is its
    ``VfOps``, ``writes`` the VF settings written so far (kernel op names)."""

    def __init__(self) -> None:
        self.kernel = FakeKernel()
        self.kernel.add_pf("0000:af:00.0", "pf0")
        self.kernel.add_vf("0000:af:00.0", 3, "0000:af:00.5", "pf0v3", vf=ORIG)
        self.vf = self.kernel.vf

    @property
    def writes(self) -> list[str]:
        return [op for op in self.kernel.journal if op.startswith("set_vf_")]

    def fail(self, op: str, exc: KernelError) -> None:
        self.kernel.fail(op, exc=exc)


def ops() -> Pf:
    return Pf()


def test_settings_are_applied_in_sriov_cni_order() -> None:
    pf = ops()
    rb = Rollback()
    apply_pf_settings(pf.vf, "pf0", 3, WANT, ORIG, rb)
    rb.commit()
    assert pf.writes == [
        "set_vf_vlan",
        "set_vf_mac",
        "set_vf_rate",
        "set_vf_spoofchk",
        "set_vf_trust",
        "set_vf_link_state",
    ]
    got = pf.vf.get_vf("pf0", 3)
    assert (got.vlan, got.qos, got.mac, got.trust, got.link_state) == (
        10,
        1,
        "02:00:00:00:00:01",
        True,
        2,
    )


def test_unset_settings_are_not_touched() -> None:
    pf = ops()
    rb = Rollback()
    apply_pf_settings(pf.vf, "pf0", 3, PfSettings(trust=True), ORIG, rb)
    rb.commit()
    assert pf.writes == ["set_vf_trust"]


@pytest.mark.parametrize(
    ("op", "msg"),
    [
        (
            "set_vf_vlan",
            "failed to set vf 3 vlan configuration - id 10, qos 1 and proto 802.1q",
        ),
        ("set_vf_mac", "failed to set MAC address to 02:00:00:00:00:01"),
        (
            "set_vf_rate",
            "failed to set vf 3 min_tx_rate to 5 Mbps: max_tx_rate to 50 Mbps",
        ),
        ("set_vf_spoofchk", "failed to set vf 3 spoofchk flag to off"),
        ("set_vf_trust", "failed to set vf 3 trust flag to on"),
        ("set_vf_link_state", "failed to set vf 3 link state to 2"),
    ],
)
def test_failure_half_way_restores_every_setting_sriov_cni_119(
    op: str, msg: str
) -> None:
    pf = ops()
    pf.fail(op, NotSupported("operation not supported"))
    with pytest.raises(CniError) as info, Rollback() as rb:
        apply_pf_settings(pf.vf, "pf0", 3, WANT, ORIG, rb)
    assert info.value.code == DEVICE_ERROR
    assert msg in info.value.details
    assert pf.vf.get_vf("pf0", 3) == ORIG


def test_del_restores_only_what_add_set_newest_first() -> None:
    pf = ops()
    rb = Rollback()
    want = PfSettings(vlan=10, trust=True)
    apply_pf_settings(pf.vf, "pf0", 3, want, ORIG, rb)
    rb.commit()
    pf.kernel.journal.clear()
    assert restore_pf_settings(pf.vf, "pf0", 3, want, ORIG) == []
    assert pf.writes == ["set_vf_trust", "set_vf_vlan"]
    assert pf.vf.get_vf("pf0", 3) == ORIG


def test_del_tries_every_setting_and_reports_the_failures() -> None:
    pf = ops()
    pf.fail("set_vf_trust", DeviceBusy("busy"))
    failures = restore_pf_settings(pf.vf, "pf0", 3, WANT, ORIG)
    assert len(failures) == 1 and "trust" in failures[0]
    assert "set_vf_vlan" in pf.writes and "set_vf_link_state" in pf.writes


def test_a_setting_the_device_does_not_support_needs_no_restore() -> None:
    # Refused with EOPNOTSUPP now, so never changed by ADD either: reporting
    # it would keep a record whose DEL fails the same way forever.
    pf = ops()
    pf.fail("set_vf_trust", NotSupported("nope"))
    assert restore_pf_settings(pf.vf, "pf0", 3, WANT, ORIG) == []
