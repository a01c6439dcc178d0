# SPDX-License-Identifier: Apache-2.0
"""ib-sriov on the simulated host: GUIDs, rebind + rename, rdmaIsolation, rollback.

In-process (``plugin_funcs(make_deps, make_ipam).add(args)`` with the
production deps of a lab and a FakeIpam). Read-backs go around our adapters:
``ip -j`` for links, the recording state for GUIDs and RDMA device locations.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cni.errors import CniError
from cni.ipam import IpamError
from cni.plugins.ib_sriov import commands
from cni.state.cache import StateCache
from railyard_sim.recording import (
    Journal,
    RecordingVfOps,
    rdma_location,
    set_netns_mode,
)
from tests.doubles.sim_faults import UnbindOnlyVfOps
from tests.doubles.sriov_lab import GUID, Harness, host_links, pod_links
from tests.doubles.sriov_lab import link as host_link

pytestmark = pytest.mark.kernel

ALL_F = "ff:ff:ff:ff:ff:ff:ff:ff"


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    with Harness.up(tmp_path, rails=1, ib_rails=1) as harness:
        yield harness


def add(
    h: Harness,
    conf: dict,
    netns: str,
    vf_ops: RecordingVfOps | None = None,
    cid: str = "c1",
) -> object:
    return h.funcs(commands, h.deps(vf=vf_ops)).add(
        h.args("ADD", conf, netns, container_id=cid)
    )


def delete(h: Harness, conf: dict, netns: str, cid: str = "c1") -> None:
    h.funcs(commands).del_(h.args("DEL", conf, netns, container_id=cid))


def assert_home(h: Harness, name: str) -> None:
    """The VF stand-in is in the host as ``name``, and no rebind-named one is."""
    assert host_link(name) is not None
    rebound = f"{h.lab.prefix}ib"
    assert [n for n in host_links() if n.startswith(rebound)] == []


def test_guid_is_set_the_renamed_netdev_moves_and_del_restores_everything(
    h: Harness,
) -> None:
    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    orig_guids = h.guids(rail, vf)
    pod = h.pod()
    conf = h.ib_conf(
        vf,
        rail,
        rdmaIsolation=True,
        pkey="7fff",
        runtimeConfig={"infinibandGUID": GUID},
    )
    res = add(h, conf, pod)

    assert h.guids(rail, vf) == (GUID, GUID)
    assert Journal(h.lab.dir).ops().count("rebind") == 1
    # The rebind recreated the netdev under another name; that one went in.
    renamed = h.lab.netdev_of(vf.pci)
    assert renamed is not None and renamed != vf.netdev
    assert host_link(vf.netdev) is None and host_link(renamed) is None
    assert "net1" in pod_links(pod)
    assert rdma_location(h.lab.dir, vf.rdma) == pod
    out = res.to_json("1.0.0")  # type: ignore[attr-defined]
    assert out["interfaces"][0]["name"] == "net1"
    assert out["ips"][0]["address"] == "172.16.12.1/24"
    # pkey kept in the state for ib-kubernetes; original GUIDs in the GUID record.
    vf_rec = StateCache(h.state_dir, "ib-sriov").load("c1", "net1")
    guid_rec = StateCache(h.state_dir, "ib-sriov-guid").load("c1", "net1")
    assert vf_rec is not None and vf_rec["extra"]["pkey"] == "0x7fff"
    assert guid_rec is not None
    assert (guid_rec["orig_node_guid"], guid_rec["orig_port_guid"]) == orig_guids
    assert guid_rec["host_ifname"] == vf.netdev

    delete(h, conf, pod)
    assert h.guids(rail, vf) == orig_guids
    assert_home(h, vf.netdev)  # back under its original name
    assert pod_links(pod) == ["lo"]
    assert rdma_location(h.lab.dir, vf.rdma) is None
    assert h.state_files() == []
    delete(h, conf, pod)  # a second DEL succeeds


def test_del_restores_all_f_when_the_original_guid_was_zero(h: Harness) -> None:
    rail, vf = h.ib_rail(), h.ib_rail().vfs[1]
    from railyard_sim.recording import RecordingVfOps

    zero = "00:00:00:00:00:00:00:00"
    RecordingVfOps(h.lab.dir).set_node_guid(rail.pf_netdev, vf.index, zero)
    RecordingVfOps(h.lab.dir).set_port_guid(rail.pf_netdev, vf.index, zero)
    pod = h.pod()
    conf = h.ib_conf(vf, rail, args={"cni": {"guid": GUID}})
    add(h, conf, pod)
    assert h.guids(rail, vf) == (GUID, GUID)
    delete(h, conf, pod)
    assert h.guids(rail, vf) == (ALL_F, ALL_F)
    assert host_link(vf.netdev) is not None


def test_timeout_waiting_for_the_netdev_rolls_the_add_back_and_says_so(
    h: Harness,
) -> None:
    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    orig_guids = h.guids(rail, vf)
    h.extra_env["RAILYARD_IB_REBIND_TIMEOUT"] = "1"
    pod = h.pod()
    conf = h.ib_conf(
        vf, rail, rdmaIsolation=True, runtimeConfig={"infinibandGUID": GUID}
    )
    broken = UnbindOnlyVfOps(h.lab.dir, failing=1)
    with pytest.raises(CniError) as info:
        add(h, conf, pod, vf_ops=broken)
    err = info.value
    assert err.code == 100
    assert err.msg == f"VF {vf.pci} did not come back within 1s after the driver rebind"
    assert "no netdev appeared" in err.details
    assert err.details.endswith("the ADD was rolled back")
    assert not getattr(err, "__notes__", None)  # every undo worked
    assert broken.unbound == [vf.pci]
    # Rolled back: GUID restored (its undo rebinds, for real this time), the
    # netdev home under its original name, nothing in the pod, no records.
    assert h.guids(rail, vf) == orig_guids
    assert_home(h, vf.netdev)
    assert pod_links(pod) == ["lo"]
    assert rdma_location(h.lab.dir, vf.rdma) is None
    assert h.state_files() == []


def test_rdma_isolation_rollback_when_address_allocation_fails(h: Harness) -> None:
    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    orig_guids = h.guids(rail, vf)
    h.ipam.fail_allocate = IpamError(101, "pool gpu2-net12 is exhausted")
    pod = h.pod()
    conf = h.ib_conf(
        vf, rail, rdmaIsolation=True, runtimeConfig={"infinibandGUID": GUID}
    )
    with pytest.raises(CniError, match="exhausted"):
        add(h, conf, pod)
    assert rdma_location(h.lab.dir, vf.rdma) is None  # moved back
    assert pod_links(pod) == ["lo"]
    assert_home(h, vf.netdev)
    assert h.guids(rail, vf) == orig_guids
    assert h.ipam.addresses_of("c1", "net1") == []
    assert h.state_files() == []


def test_rdma_isolation_in_shared_mode_changes_nothing(h: Harness) -> None:
    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    set_netns_mode(h.lab.dir, "shared")
    pod = h.pod()
    conf = h.ib_conf(
        vf, rail, rdmaIsolation=True, runtimeConfig={"infinibandGUID": GUID}
    )
    with pytest.raises(CniError) as info:
        add(h, conf, pod)
    assert "expecting it to be set to exclusive" in info.value.msg
    assert "rdma system set netns exclusive" in info.value.details
    assert "set_node_guid" not in Journal(h.lab.dir).ops()
    assert host_link(vf.netdev) is not None
    assert h.state_files() == []


def test_without_a_guid_there_is_no_rebind_and_the_name_is_kept(
    h: Harness,
) -> None:
    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    pod = h.pod()
    conf = h.ib_conf(vf, rail, link_state="enable")
    add(h, conf, pod)
    ops = Journal(h.lab.dir).ops()
    assert "rebind" not in ops and "set_node_guid" not in ops
    assert "set_link_state" in ops
    assert h.lab.netdev_of(vf.pci) == vf.netdev
    delete(h, conf, pod)
    assert host_link(vf.netdev) is not None
    assert h.state_files() == []


def test_netns_gone_before_del_still_restores_guid_and_name(h: Harness) -> None:
    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    orig_guids = h.guids(rail, vf)
    pod = h.pod()
    conf = h.ib_conf(
        vf, rail, rdmaIsolation=True, runtimeConfig={"infinibandGUID": GUID}
    )
    add(h, conf, pod)
    h.lab.vanish_netns(pod, "net1")  # the VF returns to the host as "net1"
    delete(h, conf, "")
    assert h.guids(rail, vf) == orig_guids
    assert host_link(vf.netdev) is not None and host_link("net1") is None
    assert rdma_location(h.lab.dir, vf.rdma) is None
    assert h.state_files() == []


def test_check_passes_then_fails_when_the_rdma_device_left_the_pod(
    h: Harness,
) -> None:
    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    pod = h.pod()
    conf = h.ib_conf(vf, rail, rdmaIsolation=True)
    res = add(h, conf, pod)
    checked = {**conf, "prevResult": res.to_json("1.0.0")}  # type: ignore[attr-defined]
    args = h.args("CHECK", checked, pod)
    h.funcs(commands).check(args)
    from railyard_sim.recording import RecordingRdmaOps

    RecordingRdmaOps(h.lab.dir).move(vf.rdma, None, netns=pod)
    with pytest.raises(CniError) as info:
        h.funcs(commands).check(args)
    assert info.value.code == 106
    assert info.value.msg == f"RDMA device {vf.rdma} is not in {pod}"
    delete(h, conf, pod)
    assert h.state_files() == []


def test_gc_restores_guid_and_vf_of_attachments_the_runtime_dropped(
    h: Harness,
) -> None:
    rail = h.ib_rail()
    keep_vf, gone_vf = rail.vfs[0], rail.vfs[1]
    orig_gone = h.guids(rail, gone_vf)
    pod_keep, pod_gone = h.pod(), h.pod()
    conf_keep = h.ib_conf(keep_vf, rail, runtimeConfig={"infinibandGUID": GUID})
    conf_gone = h.ib_conf(
        gone_vf, rail, runtimeConfig={"infinibandGUID": "02:00:00:00:00:00:00:33"}
    )
    add(h, conf_keep, pod_keep, cid="keep")
    add(h, conf_gone, pod_gone, cid="gone")
    gc_conf = {
        "cniVersion": "1.1.0",
        "name": conf_keep["name"],
        "type": "ib-sriov",
        "ipam": conf_keep["ipam"],
    }
    args = h.args("GC", gc_conf, "")
    from cni.ipam import Attachment

    args.valid_attachments = [Attachment("keep", "net1")]
    h.funcs(commands).gc(args)
    assert h.guids(rail, gone_vf) == orig_gone
    assert host_link(gone_vf.netdev) is not None
    assert pod_links(pod_gone) == ["lo"]
    assert h.guids(rail, keep_vf) == (GUID, GUID)  # untouched
    assert "net1" in pod_links(pod_keep)
    assert h.ipam.addresses_of("gone", "net1") == []
    delete(h, conf_keep, pod_keep, cid="keep")
    assert h.state_files() == []


def test_a_del_whose_guid_restore_fails_keeps_the_record_and_a_retry_finishes(
    h: Harness,
) -> None:
    from railyard_sim.recording import Faults

    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    orig_guids = h.guids(rail, vf)
    pod = h.pod()
    conf = h.ib_conf(vf, rail, runtimeConfig={"infinibandGUID": GUID})
    add(h, conf, pod)
    Faults(h.lab.dir).inject("set_node_guid", "EBUSY", count=1)
    with pytest.raises(CniError) as info:
        delete(h, conf, pod)
    assert info.value.msg == f"failed to restore the GUID of VF {vf.pci}"
    assert "DEL can be retried" in info.value.details
    assert h.state_files() == ["ib-sriov-guid/c1-net1.json"]
    delete(h, conf, pod)
    assert h.guids(rail, vf) == orig_guids
    assert host_link(vf.netdev) is not None
    assert h.state_files() == []


def test_a_retried_add_keeps_the_original_guid_an_earlier_add_recorded(
    h: Harness,
) -> None:
    """ib-sriov-cni #217: a retried ADD must not cache our GUID as the original."""
    from railyard_sim.recording import RecordingVfOps

    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    orig_guids = h.guids(rail, vf)
    # An earlier ADD wrote our GUID, and its rollback failed before undoing it.
    ops = RecordingVfOps(h.lab.dir)
    ops.set_node_guid(rail.pf_netdev, vf.index, GUID)
    ops.set_port_guid(rail.pf_netdev, vf.index, GUID)
    StateCache(h.state_dir, "ib-sriov-guid").save(
        "c1",
        "net1",
        {
            "pci": vf.pci,
            "pf": rail.pf_netdev,
            "vf_index": vf.index,
            "orig_node_guid": orig_guids[0],
            "orig_port_guid": orig_guids[1],
            "host_ifname": vf.netdev,
            "guid": GUID,
            "dpdk": False,
            "rdma": False,
        },
    )
    pod = h.pod()
    conf = h.ib_conf(vf, rail, runtimeConfig={"infinibandGUID": GUID})
    add(h, conf, pod)
    rec = StateCache(h.state_dir, "ib-sriov-guid").load("c1", "net1")
    assert rec is not None
    assert (rec["orig_node_guid"], rec["orig_port_guid"]) == orig_guids
    delete(h, conf, pod)
    assert h.guids(rail, vf) == orig_guids
    assert h.state_files() == []


def test_the_vf_can_be_attached_again_after_del_renamed_it_back(
    h: Harness,
) -> None:
    """The plain-file PCI tree keeps the rebind's name after DEL renamed the
    netdev back (real sysfs follows renames): the next ADD still finds it."""
    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    conf = h.ib_conf(vf, rail, runtimeConfig={"infinibandGUID": GUID})
    for cid in ("c1", "c2"):
        pod = h.pod()
        add(h, conf, pod, cid=cid)
        assert "net1" in pod_links(pod)
        delete(h, conf, pod, cid=cid)
        assert_home(h, vf.netdev)
    assert Journal(h.lab.dir).ops().count("rebind") == 4
    assert h.state_files() == []


def test_del_with_ipamd_down_restores_guid_and_vf_and_the_retry_releases(
    h: Harness,
) -> None:
    from cni.errors import TRY_AGAIN_LATER

    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    orig_guids = h.guids(rail, vf)
    pod = h.pod()
    conf = h.ib_conf(
        vf, rail, rdmaIsolation=True, runtimeConfig={"infinibandGUID": GUID}
    )
    add(h, conf, pod)
    h.ipam.fail_release = IpamError(TRY_AGAIN_LATER, "ipamd is not reachable")
    with pytest.raises(CniError) as info:
        delete(h, conf, pod)
    assert info.value.code == TRY_AGAIN_LATER
    # Everything on the kernel side is back, without ipamd.
    assert h.guids(rail, vf) == orig_guids
    assert_home(h, vf.netdev)
    assert rdma_location(h.lab.dir, vf.rdma) is None
    assert h.state_files() == ["ib-sriov/c1-net1.json"]
    h.ipam.fail_release = None
    delete(h, conf, pod)
    assert h.ipam.addresses_of("c1", "net1") == []
    assert h.state_files() == []
    assert Journal(h.lab.dir).ops().count("rebind") == 2  # no extra rebind


def test_rdma_device_renumbered_by_the_guid_rebind_is_the_one_moved(
    h: Harness,
) -> None:
    from tests.doubles.sim_faults import RenumberingVfOps

    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    pod = h.pod()
    conf = h.ib_conf(
        vf, rail, rdmaIsolation=True, runtimeConfig={"infinibandGUID": GUID}
    )
    ops = RenumberingVfOps(h.lab.dir)
    add(h, conf, pod, vf_ops=ops)
    [(old, new)] = ops.renamed
    assert old == vf.rdma
    assert rdma_location(h.lab.dir, new) == pod
    rec = StateCache(h.state_dir, "ib-sriov").load("c1", "net1")
    assert rec is not None and rec["rdma_device"] == new
    h.funcs(commands, h.deps(vf=ops)).del_(h.args("DEL", conf, pod))
    [_, (_, again)] = ops.renamed  # DEL's GUID rebind renumbers it once more
    assert rdma_location(h.lab.dir, again) is None
    assert_home(h, vf.netdev)
    assert h.state_files() == []


def test_netdev_recreated_by_the_rdma_move_home_gets_its_name_back(
    h: Harness,
) -> None:
    import dataclasses

    from tests.doubles.sim_faults import RecreatingRdmaOps

    rail, vf = h.ib_rail(), h.ib_rail().vfs[0]
    before = host_link(vf.netdev)
    assert before is not None
    pod = h.pod()
    conf = h.ib_conf(vf, rail, rdmaIsolation=True, mtu=1400)
    add(h, conf, pod)
    rdma = RecreatingRdmaOps(h.lab.dir, {vf.rdma: vf.pci})
    deps = dataclasses.replace(h.deps(), rdma=rdma)
    h.funcs(commands, deps).del_(h.args("DEL", conf, pod))
    assert rdma.recreated == [vf.rdma]
    assert rdma_location(h.lab.dir, vf.rdma) is None
    assert_home(h, vf.netdev)  # the recreated netdev, renamed back
    after = host_link(vf.netdev)
    assert after is not None and after["ifindex"] != before["ifindex"]
    assert after["mtu"] == before["mtu"]
    assert h.state_files() == []
