# SPDX-License-Identifier: Apache-2.0
"""``detect`` hands a NicProbes adapter the whole NIC in one call and reads its report.

The per-family scheduling itself is pinned on real netns in
tests/kernel/test_kernel_probe_nic.py; here: what is asked, and which verdict
becomes which CNI error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from cni.attach.detection import DetectionPolicy, detect
from cni.errors import GATEWAY_UNREACHABLE, IP_CONFLICT, CniError
from cni.ipam import IpamAddress
from cni.kernel import GatewayCheck, NicProbeReport, NotSupported, ProbeAnswer

DUAL = [
    IpamAddress("172.16.11.5/24", "172.16.11.254", "p4", 4),
    IpamAddress("fd00:11::5/64", "fd00:11::fe", "p6", 6),
]
GW_MAC = "aa:aa:aa:aa:aa:aa"


@dataclass
class ScriptedNicProbes:
    """Returns a scripted report; records every call it gets."""

    report: NicProbeReport | None = None
    unsupported: bool = False
    calls: list[tuple[str, tuple[object, ...]]] = field(default_factory=list)

    def probe_nic(
        self,
        ifname: str,
        ips: Sequence[str],
        gateways: Sequence[GatewayCheck],
        netns: str | None,
        tries: int = 3,
        interval: float = 0.1,
    ) -> NicProbeReport:
        self.calls.append(
            ("probe_nic", (ifname, list(ips), list(gateways), tries, interval))
        )
        if self.unsupported:
            raise NotSupported("IPoIB")
        if self.report is not None:
            return self.report
        return NicProbeReport(
            gateways=tuple((g, ProbeAnswer(g.gateway, GW_MAC)) for g in gateways)
        )

    def conflict(self, *args: object, **kwargs: object) -> ProbeAnswer | None:
        self.calls.append(("conflict", args))
        return None

    def gateway(self, *args: object, **kwargs: object) -> ProbeAnswer | None:
        self.calls.append(("gateway", args))
        return None

    def announce(self, ifname: str, ips: Sequence[str], netns: str | None) -> None:
        self.calls.append(("announce", (ifname, list(ips))))


def test_a_dual_stack_nic_is_probed_in_one_call():
    probes = ScriptedNicProbes()
    detect(probes, "net1", "/ns", DUAL, DetectionPolicy())
    assert probes.calls == [
        (
            "probe_nic",
            (
                "net1",
                ["172.16.11.5", "fd00:11::5"],
                [
                    GatewayCheck("172.16.11.5", "172.16.11.254"),
                    GatewayCheck("fd00:11::5", "fd00:11::fe"),
                ],
                3,
                0.1,
            ),
        )
    ]


def test_switched_off_conflict_check_asks_only_for_gateways():
    probes = ScriptedNicProbes()
    detect(probes, "net1", "/ns", DUAL, DetectionPolicy(conflict=False))
    (_, (_, ips, gateways, _, _)), *_ = probes.calls
    assert ips == [] and len(gateways) == 2


def test_switched_off_gateway_check_asks_only_for_conflicts():
    probes = ScriptedNicProbes()
    detect(probes, "net1", "/ns", DUAL, DetectionPolicy(gateway=False))
    (_, (_, ips, gateways, _, _)), *_ = probes.calls
    assert ips == ["172.16.11.5", "fd00:11::5"] and gateways == []


def test_both_checks_off_probe_nothing():
    probes = ScriptedNicProbes()
    detect(probes, "net1", "/ns", DUAL, DetectionPolicy(conflict=False, gateway=False))
    assert probes.calls == []


def test_a_conflict_names_the_ip_and_the_mac_that_answered():
    probes = ScriptedNicProbes(
        report=NicProbeReport(conflict=ProbeAnswer("fd00:11::5", "de:ad:be:ef:00:06"))
    )
    with pytest.raises(CniError) as info:
        detect(probes, "net1", "/ns", DUAL, DetectionPolicy())
    assert (info.value.code, info.value.msg) == (
        IP_CONFLICT,
        "ip conflict: fd00:11::5 is already used by de:ad:be:ef:00:06",
    )


def test_a_silent_gateway_is_named_with_the_address_that_asked():
    v4, v6 = (GatewayCheck(a.address.split("/")[0], a.gateway or "") for a in DUAL)
    probes = ScriptedNicProbes(
        report=NicProbeReport(
            gateways=((v4, ProbeAnswer(v4.gateway, GW_MAC)), (v6, None))
        )
    )
    with pytest.raises(CniError) as info:
        detect(probes, "net1", "/ns", DUAL, DetectionPolicy(interval=0.05))
    assert (info.value.code, info.value.msg) == (
        GATEWAY_UNREACHABLE,
        "gateway fd00:11::fe is unreachable",
    )
    assert "to fd00:11::5 on net1 after 3 tries of 50 ms" in info.value.details


def test_an_adapter_that_cannot_probe_this_link_skips_the_checks():
    probes = ScriptedNicProbes(unsupported=True)
    detect(probes, "net1", "/ns", DUAL, DetectionPolicy())
    assert [name for name, _ in probes.calls] == ["probe_nic"]
