# SPDX-License-Identifier: Apache-2.0
"""DEL follows what ADD recorded, on the simulated host with real netns.

One test per row of the "DEL follows the record" table (a DEL given another
pod's netns or a path that does not exist, a DEL whose netconf lost its
ipam, an ib-sriov ADD given a RoCE VF), each ending with the VF home, the
address freed exactly once and no record; then a pool run through 200
ADD/DEL cycles with randomly mismatched DEL parameters, checking after every
step that no address is configured on two live pods and that every address a
live pod carries is still held by the IPAM.
"""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cni.errors import DEVICE_ERROR, CniError
from cni.plugins.ib_sriov import commands as ib_sriov
from cni.plugins.sriov import commands as sriov
from railyard_sim.recording import RecordingRdmaOps
from tests.doubles.sriov_lab import Harness, addresses, link, vf_table

pytestmark = pytest.mark.kernel

SETTINGS = {"trust": "on", "mtu": 4200, "vlan": 7}
#: Seed of the randomized run; set RAILYARD_DEL_FUZZ_SEED to replay another.
SEED = int(os.environ.get("RAILYARD_DEL_FUZZ_SEED", "1414"))
CYCLES = 200


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    with Harness.up(tmp_path, rails=1, vfs_per_pf=2) as harness:
        yield harness


def snapshot(h: Harness, index: int = 0) -> dict[str, Any]:
    vf, rail = h.vf(index=index), h.rail()
    host = link(vf.netdev)
    assert host is not None, f"{vf.netdev} is not in the host"
    return {
        "mac": host["address"],
        "mtu": host["mtu"],
        "vf": vf_table(h.lab, rail.pf_netdev, vf.index),
    }


def run(h: Harness, command: str, conf: dict[str, Any], netns: str, cid: str) -> Any:
    funcs = h.funcs(sriov if conf["type"] == "sriov" else ib_sriov)
    fn = funcs.add if command == "ADD" else funcs.del_
    return fn(h.args(command, conf, netns, container_id=cid))


def freed(h: Harness, address: str) -> int:
    return sum(address in ips for _key, ips in h.ipam.freed)


def assert_done(h: Harness, before: dict[str, Any], pod: str, cid: str) -> None:
    assert snapshot(h) == before
    assert link("net1", pod) is None
    assert h.ipam.addresses_of(cid, "net1") == []
    assert freed(h, "172.16.11.1/24") == 1
    assert h.state_files() == []


@pytest.mark.parametrize("wrong", ["another-live-pod", "missing-path"])
def test_del_with_a_netns_that_is_not_the_pods_takes_the_vf_back(
    h: Harness, wrong: str
) -> None:
    before, pod, other = snapshot(h), h.pod(), h.pod()
    conf = h.conf(**SETTINGS)
    run(h, "ADD", conf, pod, "c1")
    netns = other if wrong == "another-live-pod" else "/var/run/netns/ry-gone"
    run(h, "DEL", conf, netns, "c1")
    assert_done(h, before, pod, "c1")
    run(h, "DEL", h.conf(**SETTINGS), pod, "c1")  # the correct DEL: nothing left
    assert freed(h, "172.16.11.1/24") == 1
    # The next pod on the pool gets the address with detection on, cleanly.
    third = h.pod()
    run(h, "ADD", h.conf(**SETTINGS), third, "c3")
    assert addresses("net1", third)[0] == "172.16.11.1/24"
    run(h, "DEL", h.conf(**SETTINGS), third, "c3")


def test_del_whose_netconf_lost_its_ipam_still_releases(h: Harness) -> None:
    before, pod = snapshot(h), h.pod()
    conf = h.conf(**SETTINGS)
    run(h, "ADD", conf, pod, "c1")
    edited = {k: v for k, v in conf.items() if k != "ipam"}
    run(h, "DEL", edited, pod, "c1")
    assert_done(h, before, pod, "c1")
    run(h, "DEL", edited, pod, "c1")
    assert freed(h, "172.16.11.1/24") == 1


@pytest.fixture
def hib(tmp_path: Path) -> Iterator[Harness]:
    with Harness.up(tmp_path, rails=1, vfs_per_pf=1, ib_rails=1) as harness:
        yield harness


def test_ib_sriov_refuses_a_roce_vf_and_leaves_nothing_to_clear(hib: Harness) -> None:
    h = hib
    vf, rail = h.roce_rail().vfs[0], h.roce_rail()
    before = (link(vf.netdev), vf_table(h.lab, rail.pf_netdev, vf.index))
    pod = h.pod()
    conf = h.ib_conf(vf, rail, ipam=True, runtimeConfig={"infinibandGUID": GUID})
    with pytest.raises(CniError) as info:
        run(h, "ADD", conf, pod, "c1")
    assert info.value.code == DEVICE_ERROR
    assert "is an ethernet VF; ib-sriov needs an infiniband VF" in info.value.msg
    assert (link(vf.netdev), vf_table(h.lab, rail.pf_netdev, vf.index)) == before
    assert h.ipam.held == {} and h.state_files() == []
    run(h, "DEL", conf, pod, "c1")  # exits 0: nothing was left to clear
    assert vf.rdma in RecordingRdmaOps(h.lab.dir).devices(None)


GUID = "02:00:00:00:00:00:00:21"


# ----------------------------------------------------------- randomized


@dataclass
class Pod:
    netns: str
    cid: str
    vf: int  # index of the VF it holds
    conf: dict[str, Any] = field(default_factory=dict)


MISMATCHES = ("correct", "wrong-netns", "missing-netns", "empty-netns", "no-ipam")


def live_addresses(h: Harness, pods: list[str]) -> dict[str, list[str]]:
    """Address -> the live pod netns configuring it (any link in them)."""
    seen: dict[str, list[str]] = {}
    for netns in pods:
        for ifname in ("net1",):
            for cidr in addresses(ifname, netns):
                seen.setdefault(cidr, []).append(netns)
    return seen


@pytest.mark.slow
def test_mismatched_dels_never_let_two_live_pods_hold_one_address(
    h: Harness,
) -> None:
    rng = random.Random(SEED)
    before = [snapshot(h, i) for i in range(2)]
    attached: list[Pod] = []  # ADDed, not yet DELeted
    zombies: list[str] = []  # DELeted, sandbox not torn down yet
    made = 0
    where = f"(seed {SEED})"

    def check_invariant(step: str) -> None:
        alive = [p.netns for p in attached] + zombies
        seen = live_addresses(h, alive)
        double = {a: ns for a, ns in seen.items() if len(ns) > 1}
        assert not double, f"{step}: address on two live pods {double} {where}"
        held = {a.address for ips in h.ipam.held.values() for a in ips}
        unheld = sorted(set(seen) - held)
        assert not unheld, f"{step}: {unheld} carried by a live pod, free {where}"

    for cycle in range(CYCLES):
        free = sorted({0, 1} - {p.vf for p in attached})
        if free and (not attached or rng.random() < 0.55):
            made += 1
            pod = Pod(h.pod(), f"c{made}", rng.choice(free))
            pod.conf = h.conf(index=pod.vf, detectIPConflict=False, **SETTINGS)
            run(h, "ADD", pod.conf, pod.netns, pod.cid)
            attached.append(pod)
            step = f"cycle {cycle}: ADD {pod.cid} on VF {pod.vf}"
        else:
            pod = attached.pop(rng.randrange(len(attached)))
            kind = rng.choice(MISMATCHES)
            conf, netns = pod.conf, pod.netns
            if kind == "wrong-netns":
                others = [p.netns for p in attached] + zombies
                netns = rng.choice(others) if others else h.pod()
            elif kind == "missing-netns":
                netns = f"/var/run/netns/ry-gone-{cycle}"
            elif kind == "empty-netns":
                netns = ""
            elif kind == "no-ipam":
                conf = {k: v for k, v in conf.items() if k != "ipam"}
            run(h, "DEL", conf, netns, pod.cid)
            if rng.random() < 0.3:
                run(h, "DEL", conf, netns, pod.cid)  # a repeated DEL
            zombies.append(pod.netns)
            step = f"cycle {cycle}: DEL {pod.cid} ({kind})"
        check_invariant(step)
        if zombies and rng.random() < 0.5:
            # The runtime tears a sandbox down some time after its DEL.
            gone = zombies.pop(rng.randrange(len(zombies)))
            assert link("net1", gone) is None, f"{step}: VF stranded {where}"
            subprocess.run(["ip", "netns", "del", Path(gone).name], check=True)
    for pod in attached:
        run(h, "DEL", pod.conf, pod.netns, pod.cid)
    assert h.ipam.held == {}, where
    assert h.state_files() == [], where
    assert [snapshot(h, i) for i in range(2)] == before, where
    assert len(h.ipam.freed) == made, where  # each attachment freed exactly once
