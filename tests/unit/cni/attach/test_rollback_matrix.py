# SPDX-License-Identifier: Apache-2.0
"""The lifecycle's rollback matrix on the fake kernel: no root, every step.

The steps are not listed by hand: a clean ADD (and DEL) of each scenario runs
once at collection, and every kernel operation it journals that changes
something becomes a case. A failure injected at that step must leave the
host as it was before the ADD - the VF in the host under its name with its
MAC and MTU, the PF's VF entry (MAC, VLAN, QoS, spoofchk, trust, link state,
rates, GUIDs) as it was, the RDMA device home, the pod as the runtime made
it, the address released exactly once and no record or marker left. A DEL
that fails at a step must be completed by the runtime's retry, with the same
end state. When the undo fails too, the record must let DEL finish the job.

Every command runs through the plugin's real entry (``cni.skel.run_plugin``):
the runtime reads a failure as its error JSON, which must carry the device
error code (never 999, "internal") and name the step and the device.
"""

from __future__ import annotations

import errno
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cni.errors import DEVICE_ERROR, INVALID_ENV, CniError
from tests.unit.cni.attach.node import Node, Snapshot, Vf

#: Journal entries that change the host (or, for probe_nic, decide the ADD).
STEPS = frozenset(
    {
        "get_vf",
        "set_vf_vlan",
        "set_vf_mac",
        "set_vf_rate",
        "set_vf_spoofchk",
        "set_vf_trust",
        "set_vf_link_state",
        "set_vf_node_guid",
        "set_vf_port_guid",
        "rebind",
        "wait_netdev",
        "wait_rdma",
        "rdma_move",
        "netns_check",
        "move",
        "move_renamed",
        "rename",
        "set_mac",
        "set_mtu",
        "set_up",
        "set_down",
        "add_address",
        "probe_nic",
        "add_route",
        "add_rule",
        "del_rule",
        "del_route",
        "del_address",
    }
)

#: What the error of an ADD failing at each step says it was doing.
STEP_NAMED = {
    "get_vf": "failed to find vf",
    "set_vf_vlan": "vlan configuration",
    "set_vf_mac": "MAC address",
    "set_vf_rate": "tx_rate",
    "set_vf_spoofchk": "spoofchk",
    "set_vf_trust": "trust",
    "set_vf_link_state": "link state",
    "set_vf_node_guid": "node GUID",
    "set_vf_port_guid": "port GUID",
    "rebind": "rebind",
    "wait_netdev": "after the driver rebind",
    "wait_rdma": "after the driver rebind",
    "rdma_move": "move RDMA device",
    "netns_check": "open netns",
    "move_renamed": "into the pod",
    "rename": "into the pod",
    "set_mac": "MAC address",
    "set_mtu": "MTU",
    "set_up": "up in",
    "add_address": "IP address",
    "probe_nic": "probe for IP conflicts",
    "add_route": "add route",
    "add_rule": "add rule",
}

FULL_SRIOV: dict[str, Any] = {
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


@dataclass(frozen=True)
class Scenario:
    """One attachment: the VF it takes and the confs of its plugin chain."""

    name: str
    vf: Callable[[Node], Vf]
    confs: Callable[[Node], list[dict[str, Any]]]


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "sriov",
            lambda n: n.roce.vfs[0],
            lambda n: [n.sriov_conf(**FULL_SRIOV)],
        ),
        Scenario(
            "sriov-rdma-isolation",
            lambda n: n.roce.vfs[0],
            lambda n: [n.sriov_conf(rdmaIsolation=True, **FULL_SRIOV)],
        ),
        Scenario(
            "ib-sriov",
            lambda n: n.ib.vfs[0],
            lambda n: [n.ib_conf(link_state="enable", rdmaIsolation=True)],
        ),
        Scenario(
            "sriov+rdma-chain",
            lambda n: n.roce.vfs[0],
            lambda n: [n.sriov_conf(**FULL_SRIOV), n.rdma_conf()],
        ),
    )
}


def add_chain(node: Node, confs: list[dict[str, Any]], pod: str) -> None:
    """ADD each plugin of the chain in order; stop at the first failure,
    rolling back the earlier plugins with DEL as a runtime does."""
    done: list[dict[str, Any]] = []
    try:
        for conf in confs:
            node.run("ADD", conf, pod)
            done.append(conf)
    except BaseException:
        for conf in reversed(done):
            node.run("DEL", conf, pod)
        raise


def del_chain(node: Node, confs: list[dict[str, Any]], pod: str) -> None:
    """DEL every plugin of the chain in reverse order; raise the first error
    once all were called (a runtime goes on)."""
    first: CniError | None = None
    for conf in reversed(confs):
        try:
            node.run("DEL", conf, pod)
        except CniError as exc:
            first = first or exc
    if first is not None:
        raise first


def journal_steps(scenario: Scenario, phase: str) -> list[tuple[str, int]]:
    """(operation, nth occurrence) of every step a clean ADD or DEL takes."""
    with tempfile.TemporaryDirectory() as tmp:
        node = Node(Path(tmp))
        pod = node.pod()
        confs = scenario.confs(node)
        if phase == "DEL":
            add_chain(node, confs, pod)
            node.kernel.journal.clear()
            del_chain(node, confs, pod)
        else:
            add_chain(node, confs, pod)
        seen: dict[str, int] = {}
        out = []
        for op in node.kernel.journal:
            if op in STEPS:
                out.append((op, seen.get(op, 0)))
                seen[op] = seen.get(op, 0) + 1
        # The detection thread's probes interleave with the routing calls in
        # any order: sorted, every pytest-xdist worker collects the same list.
        return sorted(out)


def cases(phase: str) -> list[Any]:
    return [
        pytest.param(name, op, nth, id=f"{name}-{op}#{nth}")
        for name, scenario in SCENARIOS.items()
        for op, nth in journal_steps(scenario, phase)
    ]


ADD_CASES = cases("ADD")
DEL_CASES = cases("DEL")


# ------------------------------------------------------------- assertions


@dataclass
class Before:
    vf: Snapshot
    pod_links: list[str]
    pod_routes: list[Any]
    pod_rules: list[Any]


def before(node: Node, vf: Vf, pod: str) -> Before:
    k = node.kernel
    return Before(
        node.snapshot(vf), k.link_names(pod), k.routes_in(pod), k.rules_in(pod)
    )


def assert_host_as_before(node: Node, vf: Vf, pod: str, was: Before) -> None:
    """The VF home with every recorded field, the pod untouched, no record."""
    assert node.snapshot(vf) == was.vf
    k = node.kernel
    assert k.link_names(pod) == was.pod_links
    assert k.routes_in(pod) == was.pod_routes
    assert k.rules_in(pod) == was.pod_rules
    assert node.ipam.held == {}
    assert node.records() == []


def assert_released_once(node: Node) -> None:
    """Whatever was allocated was freed by exactly one release."""
    addresses = [a for _key, ips in node.ipam.freed for a in ips]
    assert len(addresses) == len(set(addresses)), node.ipam.freed
    assert len(node.ipam.freed) <= 1


def assert_names_the_step(err: CniError, op: str, vf: Vf, pod: str) -> None:
    """The error a runtime reads: the device error code, the step and the
    device it failed on named (a VF, its netdev or PF, the pod interface, or
    the pod netns for a policy rule)."""
    text = f"{err.msg}: {err.details}"
    if op == "netns_check" and err.code == INVALID_ENV:
        # The skeleton's look at CNI_NETNS before each plugin of the chain
        # runs (the other netns_check is the move's): the runtime's env, 4.
        assert err.msg == "CNI_NETNS cannot be opened", text
        assert pod in err.details, text
        return
    assert err.code == DEVICE_ERROR, text
    assert STEP_NAMED[op] in text, text
    devices = (vf.pci, vf.netdev, vf.pf, vf.rdma, "net1", pod)
    assert any(d in text for d in devices), text


def setup(root: Path, name: str) -> tuple[Node, Scenario, Vf, str, Before]:
    node = Node(root)
    scenario = SCENARIOS[name]
    vf = scenario.vf(node)
    pod = node.pod()
    return node, scenario, vf, pod, before(node, vf, pod)


# ------------------------------------------------------------------ tests


def test_the_matrix_covers_every_kind_of_step() -> None:
    ops = {c.values[1] for c in ADD_CASES}
    # Into the pod, the move and the rename are one request ("move_renamed",
    # whose rename step fails apart as "rename").
    assert {"set_vf_trust", "move_renamed", "rename", "add_rule", "rdma_move"} <= ops
    assert {"set_vf_node_guid", "rebind", "probe_nic", "add_address"} <= ops
    assert {"del_rule", "set_down", "move", "rdma_move"} <= {
        c.values[1] for c in DEL_CASES
    }


@pytest.mark.parametrize(("name", "op", "nth"), ADD_CASES)
def test_add_failing_at_a_step_leaves_the_host_as_it_was(
    state_root: Path, name: str, op: str, nth: int
) -> None:
    node, scenario, vf, pod, was = setup(state_root, name)
    node.kernel.fail(op, errno.EIO, after=nth)
    with pytest.raises(CniError) as failed:
        add_chain(node, scenario.confs(node), pod)
    assert node.kernel.pending_faults() == [], f"{op}#{nth} never ran"
    assert_names_the_step(failed.value, op, vf, pod)
    assert_host_as_before(node, vf, pod, was)
    assert_released_once(node)


@pytest.mark.parametrize(("name", "op", "nth"), ADD_CASES)
def test_add_whose_undo_fails_too_is_finished_by_del(
    state_root: Path, name: str, op: str, nth: int
) -> None:
    """The step fails and so does the next call of that operation (its undo,
    mostly): whatever the rollback could not do, DEL (retried) does."""
    node, scenario, vf, pod, was = setup(state_root, name)
    confs = scenario.confs(node)
    node.kernel.fail(op, errno.EIO, after=nth, times=2)
    with pytest.raises(CniError) as failed:
        add_chain(node, confs, pod)
    assert_names_the_step(failed.value, op, vf, pod)
    node.kernel.clear_faults()
    for _ in range(2):
        del_chain(node, confs, pod)
    assert_host_as_before(node, vf, pod, was)
    assert_released_once(node)


@pytest.mark.parametrize(("name", "op", "nth"), DEL_CASES)
def test_del_failing_at_a_step_is_completed_by_the_retry(
    state_root: Path, name: str, op: str, nth: int
) -> None:
    node, scenario, vf, pod, was = setup(state_root, name)
    confs = scenario.confs(node)
    add_chain(node, confs, pod)
    node.kernel.fail(op, errno.EIO, after=nth)
    try:
        del_chain(node, confs, pod)
    except CniError as err:
        # A DEL may fail; it says which device it could not restore, and the
        # retry finishes.
        assert err.code == DEVICE_ERROR, err
        assert vf.pci in err.msg or vf.rdma in err.msg, err
    assert node.kernel.pending_faults() == [], f"{op}#{nth} never ran"
    del_chain(node, confs, pod)
    del_chain(node, confs, pod)  # and DEL stays idempotent afterwards
    assert_host_as_before(node, vf, pod, was)
    assert len(node.ipam.freed) == 1
    assert_released_once(node)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_clean_add_and_del_round_trip(state_root: Path, name: str) -> None:
    node, scenario, vf, pod, was = setup(state_root, name)
    confs = scenario.confs(node)
    add_chain(node, confs, pod)
    assert node.snapshot(vf).netns == pod
    assert node.snapshot(vf).name == "net1"
    del_chain(node, confs, pod)
    assert_host_as_before(node, vf, pod, was)
    assert len(node.ipam.freed) == 1
