# SPDX-License-Identifier: Apache-2.0
"""The railyard-ib-sriov binary on the simulated host: a plain ADD/DEL, and the
per-PF lock (a rebind on one PF serialises its VFs, never another PF's).

No IPAM here (ib-sriov allows none): the subject is the VF, GUID and lock.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cni.state.locks import Locks
from railyard_sim.recording import Journal, rdma_location
from tests.doubles.sriov_lab import GUID, Harness, pod_links
from tests.doubles.sriov_lab import link as host_link

pytestmark = pytest.mark.integration


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    with Harness.up(tmp_path, rails=1, ib_rails=2) as harness:
        yield harness


def start(
    h: Harness, command: str, conf: dict[str, Any], netns: str, cid: str
) -> subprocess.Popen[str]:
    env = {
        **h.env,
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": netns,
        "CNI_IFNAME": "net1",
        "PATH": "/usr/sbin:/usr/bin",
    }
    proc = subprocess.Popen(
        [str(h.lab.bin_dir / "ib-sriov")],  # the lab's launcher
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(conf))
    proc.stdin.close()
    return proc


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> dict[str, Any]:
    out = proc.stdout.read() if proc.stdout else ""
    proc.wait(timeout=timeout)
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 0, f"{out}\n{err}"
    return json.loads(out) if out.strip() else {}


def test_binary_add_and_del_with_guid_and_rdma_isolation(h: Harness) -> None:
    rail = h.ib_rail(1)
    vf = rail.vfs[0]
    pod = h.pod()
    conf = h.ib_conf(
        vf, rail, ipam=False, rdmaIsolation=True, runtimeConfig={"infinibandGUID": GUID}
    )
    result = finish(start(h, "ADD", conf, pod, "b1"))
    assert result["interfaces"][0]["name"] == "net1"
    assert result["interfaces"][0]["sandbox"] == pod
    assert "net1" in pod_links(pod)
    assert rdma_location(h.lab.dir, vf.rdma) == pod
    assert h.guids(rail, vf) == (GUID, GUID)
    finish(start(h, "DEL", conf, pod, "b1"))
    assert host_link(vf.netdev) is not None
    assert rdma_location(h.lab.dir, vf.rdma) is None
    assert h.state_files() == []


def test_a_rebind_in_flight_on_one_pf_blocks_its_vfs_but_not_another_pf(
    h: Harness,
) -> None:
    pf_a, pf_b = h.ib_rail(1), h.ib_rail(2)
    pod_a, pod_b = h.pod(), h.pod()
    conf_a = h.ib_conf(
        pf_a.vfs[1], pf_a, ipam=False, runtimeConfig={"infinibandGUID": GUID}
    )
    conf_b = h.ib_conf(
        pf_b.vfs[0],
        pf_b,
        ipam=False,
        runtimeConfig={"infinibandGUID": "02:00:00:00:00:00:00:22"},
    )
    # Stand in for a rebind in flight on PF A: hold its lock.
    held = Locks(h.state_dir).lock(f"ib-pf-{pf_a.pf_pci}")
    held.acquire()
    try:
        blocked = start(h, "ADD", conf_a, pod_a, "la")
        finish(start(h, "ADD", conf_b, pod_b, "lb"))  # PF B is not blocked
        assert "net1" in pod_links(pod_b)
        with pytest.raises(subprocess.TimeoutExpired):
            blocked.wait(timeout=1.0)  # still waiting for PF A's lock
        assert "net1" not in pod_links(pod_a)
        rebinds = [e.args["pci"] for e in Journal(h.lab.dir).entries("rebind")]
        assert rebinds == [pf_b.vfs[0].pci]
    finally:
        held.release()
    finish(blocked)
    assert "net1" in pod_links(pod_a)
    finish(start(h, "DEL", conf_a, pod_a, "la"))
    finish(start(h, "DEL", conf_b, pod_b, "lb"))
    assert host_link(pf_a.vfs[1].netdev) is not None
    assert host_link(pf_b.vfs[0].netdev) is not None
