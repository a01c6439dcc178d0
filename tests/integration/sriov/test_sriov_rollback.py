# SPDX-License-Identifier: Apache-2.0
"""sriov ADD rollback: a failure after each step leaves the host as it was.

PF-side steps fail through the recording seam's faults (``<lab>/faults.json``);
kernel steps through a ``FaultProxy`` around the real ``NetlinkLinks`` and
``RawProbes`` (the steps before the fault really happened); IPAM through the
FakeIpam. After every failure: the VF is back in the host with its name, MAC
and MTU, its PF-side settings are the originals (sriov-cni #119), the address
is released, and neither a record nor an allocation marker is left.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cni.errors import IPAM_ERROR, CniError
from cni.ipam import IpamError
from cni.kernel import KernelError
from cni.plugins.sriov import commands
from railyard_sim.recording import Faults, RecordingRdmaOps
from tests.doubles.sriov_lab import Harness, link, rules, vf_table

pytestmark = pytest.mark.kernel

FULL = {
    "mac": "02:aa:bb:cc:dd:01",
    "vlan": 100,
    "vlanQoS": 2,
    "spoofchk": "off",
    "trust": "on",
    "link_state": "enable",
    "min_tx_rate": 10,
    "max_tx_rate": 100,
    "mtu": 4200,
}


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    with Harness.up(tmp_path, rails=1) as harness:
        yield harness


def snapshot(h: Harness) -> dict[str, Any]:
    vf, rail = h.vf(), h.rail()
    host = link(vf.netdev)
    assert host is not None
    return {
        "mac": host["address"],
        "mtu": host["mtu"],
        "vf": vf_table(h.lab, rail.pf_netdev, vf.index),
    }


def assert_pristine(h: Harness, before: dict[str, Any], pod: str) -> None:
    assert snapshot(h) == before
    assert link("net1", pod) is None
    assert [r for r in rules(pod) if r.get("src", "").startswith("172.16.")] == []
    assert h.ipam.held == {}
    assert list((h.state_dir / "sriov").glob("*.json")) == []
    assert not (h.state_dir / "pci" / h.vf().pci).exists()


def run_add(h: Harness, pod: str, deps: Any = None, **extra: Any) -> CniError:
    conf = h.conf(v6=True, **{**FULL, **extra})
    args = h.args("ADD", conf, pod)
    with pytest.raises((CniError, KernelError)) as info:
        h.funcs(commands, deps or h.deps()).add(args)
    err = info.value
    return err if isinstance(err, CniError) else CniError(0, str(err))


@pytest.mark.parametrize(
    "op",
    ["set_vlan", "set_mac", "set_rate", "set_spoofchk", "set_trust", "set_link_state"],
)
def test_pf_setting_failure_restores_every_earlier_pf_setting(
    h: Harness, op: str
) -> None:
    before, pod = snapshot(h), h.pod()
    Faults(h.lab.dir).inject(op, "EOPNOTSUPP", count=1)
    err = run_add(h, pod)
    assert err.msg == f"failed to configure VF 0 of {h.rail().pf_netdev}"
    assert_pristine(h, before, pod)


# (proxy, method, matching calls let through before the fault)
KERNEL_STEPS = [
    ("links", "move_renamed", 0),  # host -> pod as net1, one request
    ("links", "set_mac", 0),
    ("links", "set_mtu", 0),
    ("links", "set_up", 0),
    ("links", "add_address", 1),  # the IPv6 address, after the IPv4 one
    ("probes", "probe_nic", 0),  # conflict and gateway checks, both families
    ("links", "add_route", 2),
    ("links", "add_rule", 1),
]


@pytest.mark.parametrize(("proxy", "method", "skip"), KERNEL_STEPS)
def test_kernel_step_failure_rolls_everything_back(
    h: Harness, proxy: str, method: str, skip: int
) -> None:
    before, pod = snapshot(h), h.pod()
    deps = h.deps(faulty=True)
    target = h.links if proxy == "links" else h.probes
    assert target is not None
    target.fail(method, KernelError(f"injected {method} failure"), skip=skip)
    run_add(h, pod, deps=deps)
    assert not target._faults, f"{method} was never reached"
    assert_pristine(h, before, pod)


def test_a_rename_refused_after_the_move_puts_the_vf_back(h: Harness) -> None:
    # The kernel moves, then renames in the pod: a net1 that appears in the
    # pod in between (another plugin, a racing runtime) makes it refuse the
    # rename with the VF already moved under its host name.
    before, pod = snapshot(h), h.pod()
    deps = h.deps(faulty=True)
    assert h.links is not None

    def net1_appears_just_before(*_args: Any, **_kwargs: Any) -> bool:
        ip_in(pod, "link", "add", "net1", "type", "veth")
        return False  # the real request runs

    h.links.fail("move_renamed", KernelError("unused"), when=net1_appears_just_before)
    err = run_add(h, pod, deps=deps)
    assert err.msg == f"failed to move IF {h.vf().netdev} to netns", err
    assert "File exists" in err.details
    ip_in(pod, "link", "del", "net1")
    assert_pristine(h, before, pod)
    assert link(h.vf().netdev, pod) is None


def ip_in(pod: str, *args: str) -> None:
    subprocess.run(["ip", "-n", Path(pod).name, *args], check=True)


# On DEL, with a link in the pod named like the VF's host name, the VF goes
# through a temporary netns and is renamed there (never in the host).
COLLISION_STEPS = [
    ("move", 0),  # pod -> temporary netns
    ("rename", 0),  # to its host name in the temporary netns
    ("move", 1),  # temporary netns -> host
]


@pytest.mark.parametrize(("method", "skip"), COLLISION_STEPS)
def test_del_failing_on_the_temp_netns_path_is_finished_by_the_retry(
    h: Harness, method: str, skip: int
) -> None:
    before, pod, conf = snapshot(h), h.pod(), h.conf()
    h.funcs(commands, h.deps()).add(h.args("ADD", conf, pod))
    squatter(h, pod)
    deps = h.deps(faulty=True)
    assert h.links is not None
    h.links.fail(method, KernelError(f"injected {method} failure"), skip=skip)
    with pytest.raises((CniError, KernelError)):
        h.funcs(commands, deps).del_(h.args("DEL", conf, pod))
    assert not h.links._faults, f"{method} was never reached"
    h.funcs(commands, h.deps()).del_(h.args("DEL", conf, pod))
    assert snapshot(h) == before
    assert link("net1", pod) is None
    assert h.ipam.held == {}
    assert link(h.vf().netdev, pod) is not None  # the pod's own link is untouched


def squatter(h: Harness, pod: str) -> None:
    """A veth pair in the pod, one end named like the VF in the host."""
    ip_in(pod, "link", "add", h.vf().netdev, "type", "veth")


def moves(h: Harness) -> int:
    assert h.links is not None
    return sum(1 for name in h.links.names() if name in ("move", "move_renamed"))


def test_add_and_del_each_move_the_netdev_once_when_names_are_free(
    h: Harness,
) -> None:
    pod, conf = h.pod(), h.conf()
    deps = h.deps(faulty=True)
    assert h.links is not None
    h.funcs(commands, deps).add(h.args("ADD", conf, pod))
    assert moves(h) == 1
    assert link("net1", pod) is not None
    deps = h.deps(faulty=True)  # the ADD closed the first
    assert h.links is not None
    h.funcs(commands, deps).del_(h.args("DEL", conf, pod))
    assert moves(h) == 1
    host = link(h.vf().netdev)
    assert host is not None and "net1" not in host.get("altnames", [])


def test_a_pod_link_named_like_the_vf_costs_del_a_temp_netns_not_add(
    h: Harness,
) -> None:
    pod, conf = h.pod(), h.conf()
    before = snapshot(h)
    squatter(h, pod)
    deps = h.deps(faulty=True)
    assert h.links is not None
    h.funcs(commands, deps).add(h.args("ADD", conf, pod))
    # The kernel takes the new name at the move when the old one is taken.
    assert moves(h) == 1
    assert link("net1", pod) is not None
    assert link(h.vf().netdev, pod) is not None  # the squatter kept its name
    deps = h.deps(faulty=True)  # the ADD closed the first
    assert h.links is not None
    h.funcs(commands, deps).del_(h.args("DEL", conf, pod))
    assert moves(h) == 2
    assert snapshot(h) == before


def test_ipam_failure_rolls_back_the_moved_vf(h: Harness) -> None:
    before, pod = snapshot(h), h.pod()
    h.ipam.fail_allocate = IpamError(IPAM_ERROR, "pool exhausted")
    err = run_add(h, pod)
    assert (err.code, err.msg) == (IPAM_ERROR, "pool exhausted")
    assert_pristine(h, before, pod)


def test_rdma_isolation_joins_the_rollback_when_ipam_fails(h: Harness) -> None:
    before, pod = snapshot(h), h.pod()
    h.ipam.fail_allocate = IpamError(IPAM_ERROR, "pool exhausted")
    run_add(h, pod, rdmaIsolation=True)
    assert_pristine(h, before, pod)
    assert h.vf().rdma in RecordingRdmaOps(h.lab.dir).devices(None)


def test_rdma_isolation_moves_the_rdma_device_into_the_pod(h: Harness) -> None:
    pod = h.pod()
    conf = h.conf(rdmaIsolation=True)
    h.funcs(commands).add(h.args("ADD", conf, pod))
    assert h.vf().rdma in RecordingRdmaOps(h.lab.dir).devices(pod)
    h.funcs(commands).del_(h.args("DEL", conf, pod))
    assert h.vf().rdma in RecordingRdmaOps(h.lab.dir).devices(None)


def test_failed_undo_keeps_the_record_so_del_finishes_the_job(h: Harness) -> None:
    before, pod = snapshot(h), h.pod()
    deps = h.deps(faulty=True)
    assert h.links is not None
    h.ipam.fail_allocate = IpamError(IPAM_ERROR, "pool exhausted")
    # The undo of the MTU change fails: the VF cannot be fully restored now.
    h.links.fail("set_mtu", KernelError("injected"), skip=1)
    err = run_add(h, pod, deps=deps)
    assert "rollback incomplete" in " ".join(getattr(err, "__notes__", [])) or (
        list((h.state_dir / "sriov").glob("*.json"))
    )
    assert list((h.state_dir / "sriov").glob("*.json"))
    h.funcs(commands).del_(h.args("DEL", h.conf(v6=True, **FULL), pod))
    assert_pristine(h, before, pod)
