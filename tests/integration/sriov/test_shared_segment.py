# SPDX-License-Identifier: Apache-2.0
"""Several NICs of one pod on one L2 segment, with conflict detection on.

Nine VFs of one simulated PF sit on one bridge (one subnet, 172.16.11.0/24):
the layout of two networks on one resource, or of a flat RoCE fabric. Each
NIC is a network of its own, attached through the lab agent's shims with
ipamd; the peer is the fabric's bridge (the rail's gateway), which asks
"who has <ip>?" and hears every answer.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cni.errors import IP_CONFLICT
from railyard_sim.lab import Lab
from railyard_sim.runtime import Attachment, PluginError, Runtime
from tests.doubles.arp_peer import who_has
from tests.doubles.lab_ipamd import allocations, lab_with_agent, warm_runtime
from tests.doubles.sriov_lab import addresses, link

pytestmark = pytest.mark.integration

NICS = 8


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("i22segment")
    with lab_with_agent(root, rails=1, vfs_per_pf=NICS + 1) as built:
        yield built


def nic_conf(lab: Lab, index: int, **extra: Any) -> dict[str, Any]:
    rail = lab.rail(1)
    plugin = {
        "type": "sriov",
        "deviceID": rail.vfs[index].pci,
        "ipam": {"type": "spiderpool", "default_ipv4_ippool": [rail.pool_v4]},
        **extra,
    }
    return {"cniVersion": "1.0.0", "name": f"seg-nic{index}", "plugins": [plugin]}


def host_view(lab: Lab) -> list[tuple[Any, ...]]:
    """Each VF in the host: name, MAC, MTU, state and its ARP/rp_filter settings."""
    out = []
    for vf in lab.rail(1).vfs:
        got = link(vf.netdev)
        assert got is not None, f"{vf.netdev} is not in the host"
        conf = Path("/proc/sys/net/ipv4/conf") / vf.netdev
        sysctls = tuple(
            (conf / k).read_text().strip()
            for k in ("arp_ignore", "arp_announce", "rp_filter")
        )
        out.append((vf.netdev, got["address"], got["mtu"], got["operstate"], sysctls))
    return out


class Pod:
    def __init__(self, lab: Lab, rt: Runtime, suffix: str) -> None:
        self.lab, self.rt = lab, rt
        self.name = lab.netns_name(suffix)
        self.path = f"/var/run/netns/{self.name}"
        self.attached: list[tuple[dict[str, Any], Attachment]] = []
        subprocess.run(["ip", "netns", "add", self.name], check=True)

    def add(self, index: int, **extra: Any) -> str:
        conf = nic_conf(self.lab, index, **extra)
        att = Attachment(f"c{self.name}", self.path, f"net{index + 1}")
        self.attached.append((conf, att))
        self.rt.add(conf, att)
        return att.ifname

    def delete_all(self) -> None:
        while self.attached:
            conf, att = self.attached.pop()
            self.rt.delete(conf, att)

    def close(self) -> None:
        try:
            self.delete_all()
        finally:
            subprocess.run(["ip", "netns", "del", self.name], check=False)


@pytest.fixture
def pod(lab: Lab, tmp_path: Path) -> Iterator[Pod]:
    made = Pod(lab, warm_runtime(lab, tmp_path), "s")
    try:
        yield made
    finally:
        made.close()


def test_eight_nics_on_one_segment_attach_and_each_address_is_answered_by_its_nic(
    lab: Lab, pod: Pod
) -> None:
    before = host_view(lab)
    rail = lab.rail(1)
    nics = [pod.add(i) for i in range(NICS)]  # detection on (the default)

    for ifname in nics:
        (address,) = addresses(ifname, pod.path)
        ip = address.split("/")[0]
        mac = link(ifname, pod.path)["address"]
        answered = who_has(rail.fabric_netns, rail.bridge, rail.gateway_v4, ip)
        assert answered == {mac}, f"ARP for {ip} ({ifname}) answered by {answered}"
        conf = f"net/ipv4/conf/{ifname}"
        got = subprocess.run(
            ["ip", "netns", "exec", pod.name, "sysctl", "-n",
             f"{conf}/arp_ignore", f"{conf}/arp_announce", f"{conf}/rp_filter"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert got == ["1", "2", "2"]

    pod.delete_all()
    assert host_view(lab) == before
    assert allocations(lab) == []


def test_a_real_owner_on_the_segment_is_still_caught(lab: Lab, pod: Pod) -> None:
    rail = lab.rail(1)
    for i in range(2):
        pod.add(i)
    # the next free address (.3) is held by a host on the segment: the bridge
    owner = link(rail.bridge, f"/var/run/netns/{rail.fabric_netns}")["address"]
    subprocess.run(
        ["ip", "-n", rail.fabric_netns, "addr", "add", "172.16.11.3/24",
         "dev", rail.bridge],
        check=True,
    )  # fmt: skip
    try:
        with pytest.raises(PluginError) as err:
            pod.add(2)
    finally:
        subprocess.run(
            ["ip", "-n", rail.fabric_netns, "addr", "del", "172.16.11.3/24",
             "dev", rail.bridge],
            check=False,
        )  # fmt: skip
    assert err.value.code == IP_CONFLICT
    assert err.value.msg == f"ip conflict: 172.16.11.3 is already used by {owner}"
    assert link("net3", pod.path) is None  # rolled back
    assert {a["ip"] for a in allocations(lab)} == {"172.16.11.1", "172.16.11.2"}


def test_without_rail_sysctls_the_pods_own_answers_are_still_no_conflict(
    lab: Lab, pod: Pod
) -> None:
    # tuneRailSysctls: false keeps the kernel's arp_ignore=0: net1 answers for
    # net2's address (ARP flux, shown by the peer), and detection knows that
    # answer for the pod's own
    net1 = pod.add(0, tuneRailSysctls=False)
    net2 = pod.add(1, tuneRailSysctls=False)
    rail = lab.rail(1)
    (address,) = addresses(net2, pod.path)
    macs = {link(n, pod.path)["address"] for n in (net1, net2)}
    answered = who_has(
        rail.fabric_netns, rail.bridge, rail.gateway_v4, address.split("/")[0]
    )
    assert answered == macs
