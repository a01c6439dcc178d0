# SPDX-License-Identifier: Apache-2.0
"""sriov with ``rdmaIsolation`` / ``enableRdma``: the RDMA move inside one ADD.

cni.attach.rdma joins the sriov ADD's rollback, so one failure (here the
address allocation) undoes the VF and the RDMA move together. In-process with
the production deps of a lab (the sriov helper's Harness) and a FakeIpam.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cni.errors import CniError
from cni.ipam import IpamError
from cni.plugins.sriov import commands
from railyard_sim.recording import rdma_location
from tests.doubles.sriov_lab import Harness, link

pytestmark = pytest.mark.kernel


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    with Harness.up(tmp_path, rails=1) as harness:
        yield harness


def run(h: Harness, command: str, conf: dict, netns: str) -> object:
    funcs = h.funcs(commands)
    fn = funcs.add if command == "ADD" else funcs.del_
    return fn(h.args(command, conf, netns))


@pytest.mark.parametrize("key", ["rdmaIsolation", "enableRdma"])
def test_sriov_moves_the_rdma_device_with_the_vf_and_back(h: Harness, key: str) -> None:
    vf = h.vf()
    pod = h.pod()
    conf = h.conf(**{key: True})
    run(h, "ADD", conf, pod)
    assert rdma_location(h.lab.dir, vf.rdma) == pod
    run(h, "DEL", conf, pod)
    assert rdma_location(h.lab.dir, vf.rdma) is None
    assert link(vf.netdev) is not None


def test_address_allocation_failure_undoes_the_rdma_move_and_the_vf(
    h: Harness,
) -> None:
    vf = h.vf()
    pod = h.pod()
    h.ipam.fail_allocate = IpamError(101, "pool gpu1-net11 is exhausted")
    with pytest.raises(CniError, match="exhausted"):
        run(h, "ADD", h.conf(rdmaIsolation=True), pod)
    assert rdma_location(h.lab.dir, vf.rdma) is None
    assert link(vf.netdev) is not None  # the VF is home under its name
    assert link("net1", pod) is None


def test_del_with_empty_netns_brings_the_rdma_device_home_from_the_live_pod(
    h: Harness,
) -> None:
    vf = h.vf()
    pod = h.pod()
    conf = h.conf(rdmaIsolation=True)
    run(h, "ADD", conf, pod)
    run(h, "DEL", conf, "")  # the runtime lost the netns; the pod still lives
    # Both come home from the recorded netns.
    assert rdma_location(h.lab.dir, vf.rdma) is None
    assert link("net1", pod) is None and link(vf.netdev) is not None
