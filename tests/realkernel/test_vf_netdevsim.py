# SPDX-License-Identifier: Apache-2.0
"""The production VfOps adapter (cni.kernel.vf) against a real VF table.

A netdevsim device is the PF: the kernel validates every IFLA_VF_* request
(rtnetlink's checks, then the driver's) and reports the table back in
IFLA_VFINFO_LIST, as on a node. netdevsim has no VF PCI functions or VF
netdevs, and no IB GUIDs (its answer, EOPNOTSUPP, is pinned). What mlx5 would
answer differently is in the README's test section.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from cni.attach.pf import apply_pf_settings, restore_pf_settings
from cni.errors import CniError
from cni.kernel import (
    DeviceNotFound,
    InvalidArgument,
    KernelError,
    LinkNotFound,
    NotSupported,
    VfInfo,
    rtnl,
)
from cni.kernel.sysfs import Sysfs
from cni.kernel.vf import RTEXT_FILTER_VF, NetlinkVfOps, decode_vfs, num_vfs
from cni.record.vf import PfSettings
from cni.rollback import Rollback
from tests.realkernel.conftest import NetdevsimPf

pytestmark = pytest.mark.realkernel

MakePf = Callable[..., NetdevsimPf]


@pytest.fixture
def ops() -> NetlinkVfOps:
    return NetlinkVfOps(Sysfs())


@pytest.fixture
def pf(make_pf: MakePf) -> str:
    return make_pf(vfs=8).netdev


def test_a_fresh_vf_reads_back_as_the_kernel_keeps_it(
    ops: NetlinkVfOps, pf: str
) -> None:
    # netdevsim zeroes its table: spoofchk and trust off, and no VLAN protocol
    # at all until one is set (mlx5 reports 802.1Q and spoofchk on).
    assert ops.get_vf(pf, 7) == VfInfo(vf=7, vlan_proto=0, spoofchk=False, trust=False)


def test_mac_is_stored_and_a_multicast_mac_is_refused(
    ops: NetlinkVfOps, pf: str
) -> None:
    ops.set_mac(pf, 1, "02:11:22:33:44:55")
    assert ops.get_vf(pf, 1).mac == "02:11:22:33:44:55"
    with pytest.raises(InvalidArgument) as err:
        ops.set_mac(pf, 1, "01:00:5e:00:00:01")
    assert err.value.errno == errno.EINVAL
    assert str(err.value) == f"PF {pf} VF 1: mac 01:00:5e:00:00:01: Invalid argument"
    assert ops.get_vf(pf, 1).mac == "02:11:22:33:44:55"  # nothing half-applied
    ops.set_mac(pf, 1, "00:00:00:00:00:00")  # zero: "no admin MAC"
    assert ops.get_vf(pf, 1).mac == "00:00:00:00:00:00"


@pytest.mark.parametrize(
    "vlan, qos, proto",
    [(100, 3, 0x8100), (200, 7, 0x88A8), (4095, 0, 0x8100), (0, 0, 0x8100)],
    ids=["802.1q-qos3", "802.1ad-qos7", "vlan4095", "vlan0-clears"],
)
def test_vlan_qos_and_protocol_are_stored(
    ops: NetlinkVfOps, pf: str, vlan: int, qos: int, proto: int
) -> None:
    ops.set_vlan(pf, 2, vlan, qos, proto)
    got = ops.get_vf(pf, 2)
    assert (got.vlan, got.qos, got.vlan_proto) == (vlan, qos, proto)


def test_the_kernel_passes_any_vlan_protocol_to_the_driver(
    ops: NetlinkVfOps, pf: str
) -> None:
    # rtnetlink checks only the id and the priority; the protocol is the
    # driver's call (netdevsim stores it; the simulator now does the same).
    ops.set_vlan(pf, 2, 10, 0, 0x1234)
    assert ops.get_vf(pf, 2).vlan_proto == 0x1234


@pytest.mark.parametrize("vlan, qos", [(4096, 0), (10, 8)], ids=["vlan4096", "qos8"])
def test_a_vlan_id_or_priority_out_of_range_is_refused(
    ops: NetlinkVfOps, pf: str, vlan: int, qos: int
) -> None:
    with pytest.raises(
        InvalidArgument, match=rf"VF 3: vlan {vlan} qos {qos} .*Invalid argument"
    ):
        ops.set_vlan(pf, 3, vlan, qos, 0x8100)
    assert ops.get_vf(pf, 3).vlan == 0


def test_rates_zero_is_unset_and_min_above_max_is_refused(
    ops: NetlinkVfOps, pf: str
) -> None:
    ops.set_rate(pf, 4, 10, 100)
    assert (ops.get_vf(pf, 4).min_tx_rate, ops.get_vf(pf, 4).max_tx_rate) == (10, 100)
    with pytest.raises(InvalidArgument, match=r"rate 200-100 Mbps: Invalid argument"):
        ops.set_rate(pf, 4, 200, 100)
    ops.set_rate(pf, 4, 50, 0)  # a floor without a ceiling is fine
    assert (ops.get_vf(pf, 4).min_tx_rate, ops.get_vf(pf, 4).max_tx_rate) == (50, 0)
    ops.set_rate(pf, 4, 0, 0)
    assert (ops.get_vf(pf, 4).min_tx_rate, ops.get_vf(pf, 4).max_tx_rate) == (0, 0)


def test_spoofchk_trust_and_link_state_round_trip(ops: NetlinkVfOps, pf: str) -> None:
    for on in (True, False):
        ops.set_spoofchk(pf, 5, on)
        ops.set_trust(pf, 5, not on)
        got = ops.get_vf(pf, 5)
        assert (got.spoofchk, got.trust) == (on, not on)
    for state in (1, 2, 0):  # enable, disable, auto
        ops.set_link_state(pf, 5, state)
        assert ops.get_vf(pf, 5).link_state == state
    with pytest.raises(InvalidArgument, match="link state 3: Invalid argument"):
        ops.set_link_state(pf, 5, 3)


@pytest.mark.parametrize("setter", ["set_node_guid", "set_port_guid"])
def test_guids_on_a_device_without_them_are_not_supported(
    ops: NetlinkVfOps, pf: str, setter: str
) -> None:
    with pytest.raises(NotSupported) as err:
        getattr(ops, setter)(pf, 0, "00:11:22:33:44:55:66:77")
    assert err.value.errno == errno.EOPNOTSUPP
    kind = setter.split("_")[1]
    assert str(err.value) == (
        f"PF {pf} VF 0: {kind} GUID 00:11:22:33:44:55:66:77: Operation not supported"
    )


def test_a_vf_or_pf_that_does_not_exist(ops: NetlinkVfOps, pf: str) -> None:
    with pytest.raises(InvalidArgument):  # the driver's range check
        ops.set_trust(pf, 8, True)
    with pytest.raises(DeviceNotFound, match=rf"PF {pf} has no VF 8 \(VFs: \[0, 1,"):
        ops.get_vf(pf, 8)
    with pytest.raises(LinkNotFound):
        ops.get_vf("i25nopf", 0)


def test_a_pf_without_vfs_reports_no_vf_list(
    ops: NetlinkVfOps, make_pf: MakePf
) -> None:
    bare = make_pf(vfs=0).netdev
    with pytest.raises(NotSupported, match=f"PF {bare} reports no SR-IOV VFs"):
        ops.get_vf(bare, 0)


@pytest.mark.parametrize("count", [8, 64, 223, 256])
def test_every_vf_of_a_large_table_is_read_and_set(
    ops: NetlinkVfOps, make_pf: MakePf, count: int
) -> None:
    pf = make_pf(vfs=count).netdev
    last = count - 1
    ops.set_mac(pf, last, "02:00:00:00:01:ff")
    ops.set_vlan(pf, last, 42, 1, 0x88A8)
    got = ops.get_vf(pf, last)
    assert (got.mac, got.vlan, got.qos, got.vlan_proto) == (
        "02:00:00:00:01:ff",
        42,
        1,
        0x88A8,
    )
    assert [ops.get_vf(pf, vf).vf for vf in (0, count // 2, last)] == [
        0,
        count // 2,
        last,
    ]


def test_with_statistics_256_vfs_do_not_fit_and_the_adapter_would_say_so(
    ops: NetlinkVfOps, make_pf: MakePf
) -> None:
    """Why the adapter asks without statistics: the kernel's own answer to
    the request it used to send holds a few dozen of the 256 VFs."""
    pf = make_pf(vfs=256).netdev
    head = rtnl.IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    with_stats = rtnl.attr_u32(rtnl.IFLA_EXT_MASK, RTEXT_FILTER_VF)
    body = head + rtnl.attr_str(rtnl.IFLA_IFNAME, pf) + with_stats
    reply = ops._talk(rtnl.RTM_GETLINK, rtnl.NLM_F_REQUEST, body, "read VF table")
    assert reply is not None
    assert num_vfs(reply) == 256
    assert 0 < len(decode_vfs(reply)) < 256


# ------------------------------------------- the attach layer's PF settings


FULL = PfSettings(
    mac="02:aa:00:00:00:07",
    vlan=300,
    qos=5,
    vlan_proto=0x88A8,
    spoofchk=True,
    trust=True,
    link_state=1,
    min_tx_rate=100,
    max_tx_rate=1000,
)
STEPS = [
    "set_vlan",
    "set_mac",
    "set_rate",
    "set_spoofchk",
    "set_trust",
    "set_link_state",
]


class FailingAt:
    """The real adapter, but the ``fail``-th apply call is refused before it
    reaches the kernel: the rollback then writes to the real table."""

    def __init__(self, ops: NetlinkVfOps, fail: str) -> None:
        self.ops, self.fail, self.calls = ops, fail, 0

    def __getattr__(self, name: str) -> object:
        method = getattr(self.ops, name)
        if name != self.fail:
            return method

        def refuse_first(*args: object) -> object:
            self.calls += 1
            if self.calls == 1:
                raise InvalidArgument(f"{name}: refused (test)", errno.EINVAL)
            return method(*args)

        return refuse_first


def _started_from(ops: NetlinkVfOps, pf: str) -> VfInfo:
    """A VF with settings of its own, so a restore that writes defaults shows."""
    ops.set_vlan(pf, 6, 12, 2, 0x8100)
    ops.set_mac(pf, 6, "02:00:00:00:00:66")
    ops.set_rate(pf, 6, 5, 50)
    ops.set_trust(pf, 6, False)
    ops.set_spoofchk(pf, 6, False)
    ops.set_link_state(pf, 6, 2)
    return ops.get_vf(pf, 6)


def test_apply_then_restore_puts_the_table_back(ops: NetlinkVfOps, pf: str) -> None:
    orig = _started_from(ops, pf)
    rb = Rollback()
    apply_pf_settings(ops, pf, 6, FULL, orig, rb)
    rb.commit()
    got = ops.get_vf(pf, 6)
    assert got == replace(
        orig, mac=FULL.mac, vlan=300, qos=5, vlan_proto=0x88A8, spoofchk=True,
        trust=True, link_state=1, min_tx_rate=100, max_tx_rate=1000,
    )  # fmt: skip
    assert restore_pf_settings(ops, pf, 6, FULL, orig) == []
    assert ops.get_vf(pf, 6) == orig


@pytest.mark.parametrize("fail", STEPS)
def test_a_refused_step_rolls_every_earlier_one_back(
    ops: NetlinkVfOps, pf: str, fail: str
) -> None:
    orig = _started_from(ops, pf)
    rb = Rollback()
    with pytest.raises(CniError) as err:
        apply_pf_settings(FailingAt(ops, fail), pf, 6, FULL, orig, rb)  # type: ignore[arg-type]
    assert "refused (test)" in str(err.value.details)
    assert rb.unwind() == []
    assert ops.get_vf(pf, 6) == orig


@pytest.mark.parametrize(
    "want, refused",
    [
        (PfSettings(vlan=4096), "vlan"),
        (PfSettings(vlan=7, mac="01:00:5e:00:00:01"), "MAC"),
        (
            PfSettings(vlan=7, mac="02:00:00:00:00:01", min_tx_rate=20, max_tx_rate=10),
            "min_tx_rate",
        ),
        (PfSettings(vlan=7, spoofchk=False, link_state=3), "link state"),
    ],
    ids=["vlan4096", "multicast-mac", "min-above-max", "link-state-3"],
)
def test_the_kernels_own_refusal_rolls_back(
    ops: NetlinkVfOps, pf: str, want: PfSettings, refused: str
) -> None:
    orig = _started_from(ops, pf)
    rb = Rollback()
    with pytest.raises(CniError) as err:
        apply_pf_settings(ops, pf, 6, want, orig, rb)
    assert refused in str(err.value.details) and "Invalid argument" in str(
        err.value.details
    )
    assert rb.unwind() == []
    assert ops.get_vf(pf, 6) == orig


def test_restoring_a_fresh_vfs_vlan_writes_802_1q(ops: NetlinkVfOps, pf: str) -> None:
    """A fresh netdevsim VF reports VLAN protocol 0; the restore writes
    802.1Q (what 0 means to the driver), so the table reads 0x8100 after."""
    orig = ops.get_vf(pf, 0)
    assert orig.vlan_proto == 0
    rb = Rollback()
    apply_pf_settings(ops, pf, 0, PfSettings(vlan=9), orig, rb)
    assert rb.unwind() == []
    assert ops.get_vf(pf, 0) == replace(orig, vlan_proto=0x8100)


# -------------------------------------------------------------------- rebind


def _virtio_rng() -> str:
    """The VM's spare PCI function (tests/realkernel/vm.py adds it)."""
    for dev in sorted(Path("/sys/bus/pci/devices").iterdir()):
        ids = (
            (dev / "vendor").read_text().strip(),
            (dev / "device").read_text().strip(),
        )
        if ids in (("0x1af4", "0x1005"), ("0x1af4", "0x1044")):
            return dev.name
    raise AssertionError("no virtio-rng PCI function in the VM")


def test_rebind_unbinds_and_binds_the_driver_again(ops: NetlinkVfOps) -> None:
    pci = _virtio_rng()
    sysfs = Sysfs()
    assert sysfs.driver(pci) == "virtio-pci"

    def probed() -> set[int]:
        """The sysfs inodes of the virtio device the driver's probe made
        (kernfs numbers them cyclically: a new probe, new numbers)."""
        return {
            p.stat().st_ino for p in Path(f"/sys/bus/pci/devices/{pci}").glob("virtio*")
        }

    before = probed()
    ops.rebind(pci)
    assert sysfs.driver(pci) == "virtio-pci"
    after = probed()
    assert before and after and not before & after


def test_rebind_of_an_unbound_function_is_device_not_found(ops: NetlinkVfOps) -> None:
    pci = _virtio_rng()
    Path("/sys/bus/pci/drivers/virtio-pci/unbind").write_text(pci)
    try:
        with pytest.raises(DeviceNotFound, match="not bound to a driver"):
            ops.rebind(pci)
    finally:
        Path("/sys/bus/pci/drivers/virtio-pci/bind").write_text(pci)
    with pytest.raises(KernelError):
        ops.rebind("0000:00:1f.7")
