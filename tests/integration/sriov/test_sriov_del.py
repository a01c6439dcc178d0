# SPDX-License-Identifier: Apache-2.0
"""sriov DEL, CHECK, GC and STATUS on the simulated host.

DEL cases of issue 3: normal, repeated, no record, empty CNI_NETNS, netns
deleted before DEL (the VF is back in the host under the pod's name,
sriov-cni #126), and a DEL that fails half-way then is retried.
"""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cni.errors import CHECK_FAILED, STATUS_UNAVAILABLE, CniError
from cni.ipam import Attachment
from cni.kernel import KernelError
from cni.plugins.sriov import commands
from cni.skel import run_plugin
from cni.types import Result
from tests.doubles.sriov_lab import (
    Harness,
    addresses,
    link,
    netns_name,
    rules,
    vf_table,
)

pytestmark = pytest.mark.kernel

SETTINGS = {"mac": "02:aa:bb:cc:dd:01", "vlan": 7, "trust": "on", "mtu": 4200}


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    with Harness.up(tmp_path, rails=1) as harness:
        yield harness


def snapshot(h: Harness, index: int = 0) -> dict[str, Any]:
    vf, rail = h.vf(index=index), h.rail()
    host = link(vf.netdev)
    assert host is not None, f"{vf.netdev} is not back in the host"
    return {
        "mac": host["address"],
        "mtu": host["mtu"],
        "vf": vf_table(h.lab, rail.pf_netdev, vf.index),
    }


def add(h: Harness, pod: str, cid: str = "c1", index: int = 0) -> Result:
    conf = h.conf(index=index, **SETTINGS)
    return h.funcs(commands).add(h.args("ADD", conf, pod, container_id=cid))


def delete(
    h: Harness, netns: str, cid: str = "c1", deps: Any = None, **conf_extra: Any
) -> None:
    conf = h.conf(**{**SETTINGS, **conf_extra})
    h.funcs(commands, deps or h.deps()).del_(
        h.args("DEL", conf, netns, container_id=cid)
    )


def record_exists(h: Harness, cid: str = "c1") -> bool:
    return (h.state_dir / "sriov" / f"{cid}-net1.json").exists()


def test_del_restores_name_mac_mtu_pf_settings_and_releases(h: Harness) -> None:
    before, pod = snapshot(h), h.pod()
    add(h, pod)
    assert link(h.vf().netdev) is None
    delete(h, pod)
    assert snapshot(h) == before
    assert link("net1", pod) is None and h.ipam.held == {}
    assert not record_exists(h)
    assert not (h.state_dir / "pci" / h.vf().pci).exists()


def test_del_removes_the_rules_it_added(h: Harness) -> None:
    pod = h.pod()
    add(h, pod)
    delete(h, pod)
    assert [r for r in rules(pod) if r.get("src") == "172.16.11.1"] == []


def test_del_twice_succeeds(h: Harness) -> None:
    before, pod = snapshot(h), h.pod()
    add(h, pod)
    delete(h, pod)
    delete(h, pod)
    assert snapshot(h) == before


def test_del_without_record_succeeds_and_still_releases_the_address(
    h: Harness,
) -> None:
    # An allocation whose ADD died before its record (or a peer-era pod).
    from cni.ipam import IpamRequest

    h.ipam.allocate(
        IpamRequest("gpu1-sriov", "c9", "net1", ipv4_pools=(h.rail().pool_v4,))
    )
    delete(h, h.pod(), cid="c9")
    assert ("gpu1-sriov", "c9", "net1") in h.ipam.released and h.ipam.held == {}


def test_del_with_empty_netns_takes_the_vf_back_from_the_recorded_netns(
    h: Harness,
) -> None:
    # The record names the pod netns, which still lives: the VF comes home
    # from there before its address is released (never the other way round).
    before, pod = snapshot(h), h.pod()
    add(h, pod)
    delete(h, "")
    assert link("net1", pod) is None
    assert snapshot(h) == before and h.ipam.held == {} and not record_exists(h)


def test_del_with_empty_netns_restores_a_vf_already_back_in_the_host(
    h: Harness,
) -> None:
    before, pod = snapshot(h), h.pod()
    add(h, pod)
    h.lab.vanish_netns(pod, "net1")
    delete(h, "")
    assert snapshot(h) == before and not record_exists(h)


def test_del_after_netns_vanished_renames_the_vf_back_and_restores_it(
    h: Harness,
) -> None:
    before, pod = snapshot(h), h.pod()
    add(h, pod)
    h.lab.vanish_netns(pod, "net1")
    returned = link("net1")
    assert returned is not None and returned["mtu"] == 4200  # sriov-cni #126
    delete(h, pod)
    assert link("net1") is None
    assert snapshot(h) == before and h.ipam.held == {} and not record_exists(h)


def test_failed_del_keeps_the_record_and_the_retry_completes(h: Harness) -> None:
    before, pod = snapshot(h), h.pod()
    add(h, pod)
    deps = h.deps(faulty=True)
    assert h.links is not None
    h.links.fail("rename", KernelError("injected rename failure"))
    with pytest.raises(CniError) as info:
        delete(h, pod, deps=deps)
    assert "DEL can be retried" in info.value.details
    assert record_exists(h)
    delete(h, pod)
    assert snapshot(h) == before and h.ipam.held == {} and not record_exists(h)


def test_next_pod_gets_the_vf_cleanly_after_del(h: Harness) -> None:
    first, second = h.pod(), h.pod()
    add(h, first)
    delete(h, first)
    add(h, second, cid="c2")
    assert link("net1", second) is not None


# ------------------------------------------------------------------ CHECK


def check(h: Harness, pod: str, prev: dict[str, Any]) -> None:
    conf = h.conf(**SETTINGS, prevResult=prev)
    h.funcs(commands).check(h.args("CHECK", conf, pod))


def test_check_passes_on_an_intact_attachment(h: Harness) -> None:
    pod = h.pod()
    prev = add(h, pod).to_json("1.0.0")
    check(h, pod, prev)


def test_check_fails_when_an_address_was_removed(h: Harness) -> None:
    pod = h.pod()
    prev = add(h, pod).to_json("1.0.0")
    subprocess.run(
        ["ip", "-n", netns_name(pod), "addr", "del", "172.16.11.1/24", "dev", "net1"],
        check=True,
    )
    with pytest.raises(CniError) as info:
        check(h, pod, prev)
    assert info.value.code == CHECK_FAILED and "172.16.11.1/24" in info.value.details


def test_check_fails_when_the_policy_rule_is_gone(h: Harness) -> None:
    pod = h.pod()
    prev = add(h, pod).to_json("1.0.0")
    subprocess.run(
        [
            "ip",
            "-n",
            netns_name(pod),
            "rule",
            "del",
            "from",
            "172.16.11.1",
            "lookup",
            "101",
        ],
        check=True,
    )
    with pytest.raises(CniError) as info:
        check(h, pod, prev)
    assert info.value.msg == "rule from 172.16.11.1/32 missing"


# --------------------------------------------------------------- GC, STATUS


def gc(h: Harness, valid: list[Attachment]) -> None:
    conf = h.conf(cniVersion="1.1.0")
    args = h.args("GC", conf, "")
    args.valid_attachments = valid
    h.funcs(commands).gc(args)


def test_gc_restores_and_releases_attachments_not_listed_as_valid(
    h: Harness,
) -> None:
    before0, before1 = snapshot(h, 0), snapshot(h, 1)
    keep, drop = h.pod(), h.pod()
    add(h, keep, cid="keep", index=0)
    add(h, drop, cid="drop", index=1)
    gc(h, [Attachment("keep", "net1")])
    assert snapshot(h, 1) == before1 and link("net1", drop) is None
    assert link("net1", keep) is not None and addresses("net1", keep)
    assert [k[1] for k in h.ipam.held] == ["keep"]
    assert record_exists(h, "keep") and not record_exists(h, "drop")
    delete(h, keep, cid="keep")
    assert snapshot(h, 0) == before0


def test_status_reports_50_when_ipamd_is_unreachable(h: Harness) -> None:
    h.ipam.available = False
    conf = h.conf(cniVersion="1.1.0")
    out = io.StringIO()
    funcs = h.funcs(commands)
    code = run_plugin(
        funcs,
        "test",
        env={"CNI_COMMAND": "STATUS", "CNI_PATH": "/usr/lib/cni"},
        stdin=io.BytesIO(json.dumps(conf).encode()),
        stdout=out,
        stderr=io.StringIO(),
    )
    assert code == 1 and json.loads(out.getvalue())["code"] == STATUS_UNAVAILABLE


def test_next_add_restores_a_vf_left_in_limbo_by_an_empty_netns_del(
    h: Harness,
) -> None:
    before, first, second = snapshot(h), h.pod(), h.pod()
    add(h, first, cid="old")
    # Renamed inside the live pod: DEL cannot recognise it, so it keeps the
    # record and the address (the VF may still carry it).
    ns = Path(first).name
    subprocess.run(["ip", "-n", ns, "link", "set", "net1", "down"], check=True)
    subprocess.run(["ip", "-n", ns, "link", "set", "net1", "name", "x1"], check=True)
    delete(h, "", cid="old")
    assert record_exists(h, "old") and h.ipam.held
    h.lab.vanish_netns(first, "x1")  # back in the host as x1, MTU 4200
    add(h, second, cid="new")
    assert link("net1", second) is not None and link("net1") is None
    delete(h, second, cid="new")
    # The originals survived: the returned VF's pod MAC/MTU were not taken
    # for them, and the old record's DEL does not touch the VF again.
    assert snapshot(h) == before
    delete(h, first, cid="old")
    assert snapshot(h) == before and not record_exists(h, "old")


# ------------------------------------------------------------------- DPDK


def test_dpdk_vf_gets_addresses_reported_not_configured_and_del_works(
    h: Harness,
) -> None:
    # A VF bound to vfio-pci has no netdev: sriov-cni reports the IPs but
    # configures nothing, and forgets the mode in its cache (PR #346).
    vf, rail = h.vf(index=1), h.rail()
    h.lab.tree.remove_netdev(vf.pci)
    h.lab.tree.set_driver(vf.pci, "vfio-pci")
    before_vf = vf_table(h.lab, rail.pf_netdev, vf.index)
    pod = h.pod()
    conf = h.conf(index=1, vlan=9)
    res = h.funcs(commands).add(h.args("ADD", conf, pod))
    assert [str(ip.address) for ip in res.ips] == ["172.16.11.1/24"]
    assert link("net1", pod) is None
    assert vf_table(h.lab, rail.pf_netdev, vf.index)["vlan"] == 9
    h.funcs(commands).del_(h.args("DEL", conf, pod))
    assert vf_table(h.lab, rail.pf_netdev, vf.index) == before_vf
    assert h.ipam.held == {} and not record_exists(h)


def test_del_restores_the_vf_even_when_ipamd_is_down_and_the_retry_releases(
    h: Harness,
) -> None:
    from cni.errors import TRY_AGAIN_LATER
    from cni.ipam import IpamError

    before, pod = snapshot(h), h.pod()
    add(h, pod)
    h.ipam.fail_release = IpamError(TRY_AGAIN_LATER, "ipamd is not reachable")
    with pytest.raises(CniError) as info:
        delete(h, pod)
    assert info.value.code == TRY_AGAIN_LATER
    # The kernel side never waits for ipamd.
    assert snapshot(h) == before and record_exists(h)
    h.ipam.fail_release = None
    delete(h, pod)
    assert snapshot(h) == before and h.ipam.held == {} and not record_exists(h)


def test_release_pending_record_is_minimal_and_frees_the_vf_for_the_next_pod(
    h: Harness,
) -> None:
    from cni.errors import TRY_AGAIN_LATER
    from cni.ipam import IpamError

    before, first, second = snapshot(h), h.pod(), h.pod()
    add(h, first, cid="old")
    h.ipam.fail_release = IpamError(TRY_AGAIN_LATER, "ipamd is not reachable")
    with pytest.raises(CniError) as info:
        delete(h, first, cid="old")
    assert info.value.code == TRY_AGAIN_LATER
    assert "release-pending" in info.value.details
    rec = json.loads((h.state_dir / "sriov" / "old-net1.json").read_text())
    assert rec["stage"] == "release-pending"
    assert rec["addresses"] == ["172.16.11.1/24"]
    assert (rec["rules"], rec["orig_vf"], rec["host_ifname"]) == ([], None, None)
    assert not (h.state_dir / "pci" / h.vf().pci).exists()  # the VF is free
    h.ipam.fail_release = None
    add(h, second, cid="new")  # another pod takes the VF meanwhile
    delete(h, first, cid="old")  # the retry only releases
    assert link("net1", second) is not None  # the new pod keeps its VF
    assert (h.state_dir / "pci" / h.vf().pci).exists()
    assert h.ipam.addresses_of("old", "net1") == [] and not record_exists(h, "old")
    delete(h, second, cid="new")
    assert snapshot(h) == before and h.ipam.held == {}


def test_gc_finishes_a_release_pending_del(h: Harness) -> None:
    from cni.errors import TRY_AGAIN_LATER
    from cni.ipam import IpamError

    before, pod = snapshot(h), h.pod()
    add(h, pod)
    h.ipam.fail_release = IpamError(TRY_AGAIN_LATER, "ipamd is not reachable")
    with pytest.raises(CniError):
        delete(h, pod)
    h.ipam.fail_release = None
    gc(h, valid=[])
    assert snapshot(h) == before and h.ipam.held == {} and not record_exists(h)


def test_del_without_record_succeeds_with_a_warning_when_ipamd_is_down(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    from cni.errors import TRY_AGAIN_LATER
    from cni.ipam import IpamError

    h.ipam.fail_release = IpamError(TRY_AGAIN_LATER, "ipamd is not reachable")
    delete(h, h.pod(), cid="never-added")
    assert any(
        r.levelname == "WARNING" and "ipamd unreachable" in r.getMessage()
        for r in caplog.records
    )
    assert not record_exists(h, "never-added")


def test_del_without_record_still_fails_on_other_ipam_errors(h: Harness) -> None:
    from cni.errors import IPAM_ERROR
    from cni.ipam import IpamError

    h.ipam.fail_release = IpamError(IPAM_ERROR, "database is corrupt")
    with pytest.raises(CniError) as info:
        delete(h, h.pod(), cid="never-added")
    assert (info.value.code, info.value.msg) == (IPAM_ERROR, "database is corrupt")


def test_any_release_failure_after_the_restore_leaves_only_the_release(
    h: Harness,
) -> None:
    from cni.errors import IPAM_ERROR
    from cni.ipam import IpamError

    before, pod = snapshot(h), h.pod()
    add(h, pod)
    h.ipam.fail_release = IpamError(IPAM_ERROR, "database is locked")
    with pytest.raises(CniError) as info:
        delete(h, pod)
    assert info.value.code == IPAM_ERROR
    assert snapshot(h) == before  # restored all the same
    rec = json.loads((h.state_dir / "sriov" / "c1-net1.json").read_text())
    assert rec["stage"] == "release-pending"
    h.ipam.fail_release = None
    delete(h, pod)
    assert h.ipam.held == {} and not record_exists(h)
