# SPDX-License-Identifier: Apache-2.0
"""sriov and ib-sriov end to end on a real VF table.

The lab variant whose PFs are netdevsim devices (railyard_sim.kernel_seams):
the plugins, run warm through the lab's railyard-agent (one lab for the
session: ``node_lab``), write every PF-side
VF setting with the production VfOps and the kernel validates and keeps it;
``ip link show <pf>`` (iproute2, an independent reader) sees it, and DEL puts
the kernel's table back. Still simulated here: the VF netdevs (veth
stand-ins), the VF PCI functions (the fake sysfs tree) and the driver rebind.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from typing import Any

import pytest

from cni.kernel.sysfs import Sysfs
from cni.kernel.vf import NetlinkVfOps
from railyard_sim import pods
from railyard_sim.lab import Lab
from railyard_sim.runtime import Attachment, PluginError

pytestmark = pytest.mark.realkernel


def iproute2_vf(pf: str, vf: int) -> dict[str, Any]:
    shown = subprocess.run(
        ["ip", "-j", "link", "show", "dev", pf],
        capture_output=True,
        text=True,
        check=True,
    )
    [link] = json.loads(shown.stdout)
    return next(v for v in link["vfinfo_list"] if v["vf"] == vf)


def test_sriov_writes_and_restores_the_kernels_vf_table(node_lab: Lab) -> None:
    lab = node_lab
    rail = lab.rails[0]
    vf = rail.vfs[1]
    ops = NetlinkVfOps(Sysfs())
    before = ops.get_vf(rail.pf_netdev, vf.index)
    pod = pods.create(lab, "i25a")
    conf = pods.conflist(rail, vf.pci, ipv6=False, rdma=False)
    conf["plugins"][0].update(
        vlan=100, vlanQoS=3, vlanProto="802.1ad", spoofchk="on", trust="on",
        min_tx_rate=10, max_tx_rate=100, link_state="disable",
    )  # fmt: skip
    att = Attachment(pod.container_id, pod.netns_path, "net1", args=pods.cni_args(pod))
    rt = pods.runtime(lab)
    result = rt.add(conf, att)
    got = ops.get_vf(rail.pf_netdev, vf.index)
    assert replace(got, mac=before.mac) == replace(
        before, vlan=100, qos=3, vlan_proto=0x88A8, spoofchk=True, trust=True,
        min_tx_rate=10, max_tx_rate=100, link_state=2,
    )  # fmt: skip
    seen = iproute2_vf(rail.pf_netdev, vf.index)
    assert seen["vlan_list"][0] == {"vlan": 100, "qos": 3, "protocol": "802.1ad"}
    assert (seen["spoofchk"], seen["trust"], seen["link_state"]) == (
        True,
        True,
        "disable",
    )
    assert (seen["rate"]["min_tx"], seen["rate"]["max_tx"]) == (10, 100)
    assert result["interfaces"][0]["name"] == "net1"

    rt.delete(conf, att, prev_result=result)
    # A fresh netdevsim VF reports VLAN protocol 0; the restore writes 802.1Q
    # (what 0 means to a driver, and the only protocol mlx5 accepts).
    assert ops.get_vf(rail.pf_netdev, vf.index) == replace(before, vlan_proto=0x8100)
    assert pods.detach(lab, pod) == []  # the sandbox (no NICs recorded) goes


def test_ib_sriov_refuses_a_netdevsim_vf_before_any_change(node_lab: Lab) -> None:
    """ib-sriov end to end with the real VfOps: netdevsim is no IPoIB device
    (it reports no VF GUIDs, the kernel's sign of one), so ib-sriov refuses
    its VF as Ethernet before the first change, and the kernel's table is
    untouched. ib-sriov's own path (GUIDs, pkeys, the rebind) needs an IPoIB
    PF: hardware."""
    lab = node_lab
    rail = lab.rails[1]
    assert rail.kind == "ib"
    vf = rail.vfs[0]
    ops = NetlinkVfOps(Sysfs())
    before = ops.get_vf(rail.pf_netdev, vf.index)
    pod = pods.create(lab, "i25b")
    conf = pods.conflist(rail, vf.pci, ipv6=False, rdma=False)
    att = Attachment(pod.container_id, pod.netns_path, "net1", args=pods.cni_args(pod))
    rt = pods.runtime(lab)
    with pytest.raises(PluginError) as err:
        rt.add(conf, att)
    assert (
        err.value.msg
        == f"VF {vf.pci} is an ethernet VF; ib-sriov needs an infiniband VF"
    )
    assert ops.get_vf(rail.pf_netdev, vf.index) == before
    rt.delete(conf, att)
    assert ops.get_vf(rail.pf_netdev, vf.index) == before
    assert pods.detach(lab, pod) == []
