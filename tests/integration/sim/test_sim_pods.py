# SPDX-License-Identifier: Apache-2.0
"""Pod sandboxes on the lab: eth0 with the pod's default route, unique names."""

from __future__ import annotations

import json
import subprocess

import pytest

from railyard_sim import pods
from railyard_sim.lab import Lab, LabError, link_names, netns_names

pytestmark = [pytest.mark.kernel, pytest.mark.integration]


def ip_j(*args: str) -> list[dict]:
    out = subprocess.run(
        ["ip", "-j", *args], capture_output=True, text=True, check=False
    ).stdout
    return json.loads(out) if out.strip() else []


def test_sandbox_has_eth0_with_the_main_default_route(lab: Lab) -> None:
    pod = pods.create(lab, "web")
    assert pod.netns in netns_names() and pod.netns.startswith(lab.prefix)
    [addr] = ip_j("-n", pod.netns, "-4", "addr", "show", "dev", "eth0")
    assert addr["addr_info"][0]["local"] == pod.eth0_ip
    assert pod.eth0_ip.startswith("10.244.")
    [default] = ip_j("-n", pod.netns, "route", "show", "default")
    assert default["dev"] == "eth0"
    assert pods.detach(lab, pod) == []
    assert pod.netns not in netns_names() and pod.eth0_host not in link_names()
    assert pods.names(lab) == []


def test_a_new_pod_reuses_a_freed_slot_without_clashing(lab: Lab) -> None:
    first, second = pods.create(lab, "a"), pods.create(lab, "b")
    pods.detach(lab, first)
    third = pods.create(lab, "c")
    assert third.eth0_host != second.eth0_host
    assert third.eth0_ip != second.eth0_ip
    assert pods.names(lab) == ["b", "c"]


def test_bad_or_duplicate_pod_names_are_refused(lab: Lab) -> None:
    pods.create(lab, "dup")
    with pytest.raises(LabError, match="exists"):
        pods.create(lab, "dup")
    with pytest.raises(LabError, match="pod name"):
        pods.create(lab, "Bad_Name")
