# SPDX-License-Identifier: Apache-2.0
"""Conflict before gateway, messages naming IP/gateway and MAC, IPoIB skipped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from cni.attach.detection import DetectionPolicy, detect
from cni.errors import GATEWAY_UNREACHABLE, IP_CONFLICT, CniError
from cni.ipam import IpamAddress
from cni.kernel import NotSupported, ProbeAnswer

IPS = [IpamAddress("172.16.11.5/24", "172.16.11.254", "p", 4)]


@dataclass
class ScriptedProbes:
    """Answers from a script; records the order of the probes."""

    conflict_answer: ProbeAnswer | None = None
    gateway_answer: ProbeAnswer | None = ProbeAnswer(
        "172.16.11.254", "aa:aa:aa:aa:aa:aa"
    )
    unsupported: bool = False
    calls: list[str] = field(default_factory=list)

    def conflict(
        self,
        ifname: str,
        ip: str,
        netns: str | None,
        tries: int = 3,
        interval: float = 0.1,
    ) -> ProbeAnswer | None:
        self.calls.append(f"conflict {ip}")
        if self.unsupported:
            raise NotSupported("no packet sockets here")
        return self.conflict_answer

    def gateway(
        self,
        ifname: str,
        ip: str,
        gateway: str,
        netns: str | None,
        tries: int = 3,
        interval: float = 0.1,
    ) -> ProbeAnswer | None:
        self.calls.append(f"gateway {gateway}")
        if self.unsupported:
            raise NotSupported("no packet sockets here")
        return self.gateway_answer

    def announce(self, ifname: str, ips: Sequence[str], netns: str | None) -> None:
        self.calls.append("announce")


def test_conflict_runs_before_the_gateway_check() -> None:
    probes = ScriptedProbes()
    detect(probes, "net1", "/ns", IPS, DetectionPolicy())
    assert probes.calls == ["conflict 172.16.11.5", "gateway 172.16.11.254"]


def test_conflict_names_the_ip_and_the_answering_mac() -> None:
    probes = ScriptedProbes(
        conflict_answer=ProbeAnswer("172.16.11.5", "de:ad:be:ef:00:01")
    )
    with pytest.raises(CniError) as info:
        detect(probes, "net1", "/ns", IPS, DetectionPolicy())
    assert info.value.code == IP_CONFLICT
    assert (
        info.value.msg
        == "ip conflict: 172.16.11.5 is already used by de:ad:be:ef:00:01"
    )
    assert probes.calls == ["conflict 172.16.11.5"]


def test_silent_gateway_is_reported_by_address() -> None:
    probes = ScriptedProbes(gateway_answer=None)
    with pytest.raises(CniError) as info:
        detect(probes, "net1", "/ns", IPS, DetectionPolicy())
    assert (info.value.code, info.value.msg) == (
        GATEWAY_UNREACHABLE,
        "gateway 172.16.11.254 is unreachable",
    )


def test_switched_off_checks_send_nothing() -> None:
    probes = ScriptedProbes(gateway_answer=None)
    detect(probes, "net1", "/ns", IPS, DetectionPolicy(conflict=False, gateway=False))
    assert probes.calls == []


def test_ipoib_links_are_skipped_not_failed() -> None:
    probes = ScriptedProbes(gateway_answer=None)
    detect(probes, "ib0", "/ns", IPS, DetectionPolicy(), link_type=32)
    assert probes.calls == []


def test_probes_the_host_cannot_run_are_skipped() -> None:
    probes = ScriptedProbes(unsupported=True)
    detect(probes, "net1", "/ns", IPS, DetectionPolicy())
    assert probes.calls == ["conflict 172.16.11.5", "gateway 172.16.11.254"]
