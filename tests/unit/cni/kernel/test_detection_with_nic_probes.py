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

from cni.attach.detection import DetectionPolicy, detect, start_detection
from cni.errors import GATEWAY_UNREACHABLE, IP_CONFLICT, CniError
from cni.ipam import IpamAddress
from cni.kernel import GatewayCheck, NicProbeReport, NotSupported, ProbeAnswer
from cni.netconf_fields import detection_window

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
                # Three probes spread inside one 90 ms window.
                pytest.approx(0.09 / 3),
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
        detect(probes, "net1", "/ns", DUAL, DetectionPolicy(window=0.15))
    assert (info.value.code, info.value.msg) == (
        GATEWAY_UNREACHABLE,
        "gateway fd00:11::fe is unreachable",
    )
    assert "to fd00:11::5 on net1 after 3 tries in 150 ms" in info.value.details


def test_an_adapter_that_cannot_probe_this_link_skips_the_checks():
    probes = ScriptedNicProbes(unsupported=True)
    detect(probes, "net1", "/ns", DUAL, DetectionPolicy())
    assert [name for name, _ in probes.calls] == ["probe_nic"]


def test_the_window_is_shared_by_the_tries():
    policy = DetectionPolicy(window=0.3, tries=3)
    assert policy.interval == pytest.approx(0.1)
    assert DetectionPolicy(conflict=False, gateway=False).enabled is False


def test_background_detection_hands_its_verdict_to_wait():
    probes = ScriptedNicProbes(
        report=NicProbeReport(conflict=ProbeAnswer("172.16.11.5", "de:ad:be:ef:00:07"))
    )
    running = start_detection(probes, "net1", "/ns", DUAL, DetectionPolicy())
    assert running is not None
    with pytest.raises(CniError) as info:
        running.wait()
    assert info.value.code == IP_CONFLICT
    assert "de:ad:be:ef:00:07" in info.value.msg


def test_no_background_detection_when_both_checks_are_off():
    probes = ScriptedNicProbes()
    policy = DetectionPolicy(conflict=False, gateway=False)
    assert start_detection(probes, "net1", "/ns", DUAL, policy) is None
    assert probes.calls == []


@pytest.mark.parametrize(
    ("raw", "window"), [({}, 0.09), ({"detectionWindowMs": 500}, 0.5)]
)
def test_the_window_is_configurable_per_network(raw: dict[str, int], window: float):
    assert detection_window(raw) == pytest.approx(window)


@pytest.mark.parametrize("bad", [0, 5, 20000])
def test_a_window_out_of_range_is_a_config_error(bad: int):
    with pytest.raises(CniError) as info:
        detection_window({"detectionWindowMs": bad})
    assert info.value.code == 7
    assert "detectionWindowMs" in info.value.msg
