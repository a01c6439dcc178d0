# SPDX-License-Identifier: Apache-2.0
"""Kernel emulation of the lab: rebind uevents, RDMA netns, vanished netns, mounts."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cni.kernel import DeviceNotFound
from railyard_sim.lab import Lab, link_names, netns_names
from railyard_sim.recording import (
    Journal,
    RecordingRdmaOps,
    RecordingVfOps,
    rdma_location,
)

pytestmark = [pytest.mark.kernel, pytest.mark.integration]

NETLINK_KOBJECT_UEVENT = 15


@contextmanager
def uevents() -> Iterator[Callable[[float], list[str]]]:
    """Kernel uevents (``add@/devices/...``) heard from now on."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_KOBJECT_UEVENT)
    sock.bind((0, 1))

    def drain(wait: float) -> list[str]:
        # Bounded: the socket hears every uevent of the machine, and other
        # work on it (netns, links) may never leave a quiet 0.2 s.
        heard = []
        deadline = time.monotonic() + wait + 3.0
        while time.monotonic() < deadline and select.select([sock], [], [], wait)[0]:
            heard.append(sock.recv(65536).split(b"\0", 1)[0].decode())
            wait = 0.2
        return heard

    try:
        yield drain
    finally:
        sock.close()


def ip_j(*args: str) -> list[dict]:
    out = subprocess.run(
        ["ip", "-j", *args], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out) if out.strip() else []


def test_rebind_recreates_the_vf_netdev_with_real_uevents(lab: Lab) -> None:
    rail = lab.rail(2)
    vf = rail.vfs[1]
    with uevents() as heard:
        RecordingVfOps(lab.dir).rebind(vf.pci)
        events = heard(1.0)
    new = lab.netdev_of(vf.pci)
    assert new is not None and new != vf.netdev and new.startswith(lab.prefix)
    assert f"remove@/devices/virtual/net/{vf.netdev}" in events
    assert f"add@/devices/virtual/net/{new}" in events
    assert new in link_names() and vf.netdev not in link_names()
    ports = {
        p["ifname"]
        for p in ip_j("-n", rail.fabric_netns, "link", "show", "master", "br0")
    }
    assert len(ports) == 3 and "vf1" not in ports
    [entry] = Journal(lab.dir).entries("rebind")
    assert entry.args == {"pci": vf.pci}


def test_second_rebind_gives_yet_another_name(lab: Lab) -> None:
    vf = lab.rail(2).vfs[0]
    ops = RecordingVfOps(lab.dir)
    ops.rebind(vf.pci)
    first = lab.netdev_of(vf.pci)
    ops.rebind(vf.pci)
    second = lab.netdev_of(vf.pci)
    assert first != second
    assert second in link_names() and first not in link_names()


def test_netdev_of_follows_a_rename_after_a_rebind_as_sysfs_would(
    lab: Lab, other_netns: Callable[[], str]
) -> None:
    vf = lab.rail(2).vfs[0]
    RecordingVfOps(lab.dir).rebind(vf.pci)
    rebound = lab.netdev_of(vf.pci)
    assert rebound is not None and rebound != vf.netdev
    # In a pod netns the stand-in is not the host's: the tree's name is kept.
    pod = Path(other_netns()).name
    subprocess.run(["ip", "link", "set", rebound, "netns", pod], check=True)
    subprocess.run(
        ["ip", "-n", pod, "link", "set", rebound, "name", "net1"], check=True
    )
    assert lab.netdev_of(vf.pci) == rebound
    # Back in the host under the lab's name, as a plugin's DEL restores it.
    subprocess.run(
        [
            "ip",
            "-n",
            pod,
            "link",
            "set",
            "net1",
            "netns",
            str(os.getpid()),
            "name",
            vf.netdev,
        ],
        check=True,
    )
    assert lab.netdev_of(vf.pci) == vf.netdev
    assert vf.netdev in link_names() and rebound not in link_names()
    # The fake tree now shows what real sysfs shows, for plugins reading it.
    assert [
        p.name for p in (lab.sys_root / "bus/pci/devices" / vf.pci / "net").iterdir()
    ] == [vf.netdev]


def test_netdev_of_an_untouched_vf_is_the_lab_name(lab: Lab) -> None:
    assert [lab.netdev_of(v.pci) for _, v in lab.vfs()] == [
        v.netdev for _, v in lab.vfs()
    ]


def test_rdma_device_moves_into_a_netns_and_back(
    lab: Lab, other_netns: Callable[[], str]
) -> None:
    pod = other_netns()
    dev = lab.rail(1).vfs[0].rdma
    rdma = RecordingRdmaOps(lab.dir)
    rdma.move(dev, pod)
    assert rdma.devices(pod) == [dev]
    assert dev not in rdma.devices()
    assert rdma_location(lab.dir, dev) == pod
    with pytest.raises(DeviceNotFound):
        rdma.move(dev, pod)  # not visible from the host any more
    rdma.move(dev, None, netns=pod)
    assert dev in rdma.devices() and rdma.devices(pod) == []
    assert rdma_location(lab.dir, dev) is None


def test_rdma_device_returns_to_the_host_when_its_netns_dies(
    lab: Lab, other_netns: Callable[[], str]
) -> None:
    pod = other_netns()
    dev = lab.rail(1).vfs[1].rdma
    RecordingRdmaOps(lab.dir).move(dev, pod)
    subprocess.run(["ip", "netns", "del", Path(pod).name], check=True)
    assert dev in RecordingRdmaOps(lab.dir).devices()
    assert rdma_location(lab.dir, dev) is None


def test_rebind_brings_the_rdma_device_back_to_the_host(
    lab: Lab, other_netns: Callable[[], str]
) -> None:
    pod = other_netns()
    vf = lab.rail(2).vfs[0]
    rdma = RecordingRdmaOps(lab.dir)
    rdma.move(vf.rdma, pod)
    RecordingVfOps(lab.dir).rebind(vf.pci)
    assert vf.rdma in rdma.devices()


def test_vanish_netns_returns_the_vf_under_its_pod_name(
    lab: Lab, other_netns: Callable[[], str]
) -> None:
    pod = other_netns()
    vf = lab.rail(1).vfs[0]
    subprocess.run(
        ["ip", "link", "set", vf.netdev, "netns", Path(pod).name], check=True
    )
    pod_name = f"{lab.prefix}n1"  # under the lab prefix: down() sweeps it
    subprocess.run(
        ["ip", "-n", Path(pod).name, "link", "set", vf.netdev, "name", pod_name, "up"],
        check=True,
    )
    lab.vanish_netns(pod, pod_name)
    assert Path(pod).name not in netns_names()
    [link] = ip_j("link", "show", "dev", pod_name)
    assert "UP" not in link["flags"]
    assert link["link_type"] == "ether"


def test_mount_over_sys_shows_the_fake_tree_at_the_real_path(lab: Lab) -> None:
    vf = lab.rail(1).vfs[0]
    target = lab.dir / "mnt-target"
    target.mkdir()
    code = (
        "import os, sys; from railyard_sim.pci_tree import PciTree; "
        "t = PciTree(sys.argv[1]); "
        "cm = t.mount_over_sys(sys.argv[2]); d = cm.__enter__(); "
        "print(os.path.basename(os.readlink(f'{d}/devices/{sys.argv[3]}/physfn'))); "
        "print(sorted(os.listdir(f'{d}/devices/{sys.argv[3]}/net')))"
    )
    out = subprocess.run(
        [
            "unshare",
            "-m",
            sys.executable,
            "-c",
            code,
            str(lab.sys_root),
            str(target),
            vf.pci,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert out[0] == lab.rail(1).pf_pci
    assert out[1] == repr([vf.netdev])
    assert list(target.iterdir()) == []  # the mount never left the private ns


def test_vanish_netns_renames_to_devN_when_the_host_name_is_taken(
    lab: Lab, other_netns: Callable[[], str]
) -> None:
    pod = Path(other_netns()).name
    vf = lab.rail(1).vfs[1]
    taken = f"{lab.prefix}n1"
    subprocess.run(
        ["ip", "link", "add", taken, "type", "veth", "peer", "name", f"{lab.prefix}n2"],
        check=True,
    )
    subprocess.run(["ip", "link", "set", vf.netdev, "netns", pod], check=True)
    subprocess.run(
        ["ip", "-n", pod, "link", "set", vf.netdev, "name", taken], check=True
    )
    [inside] = ip_j("-n", pod, "link", "show", "dev", taken)
    lab.vanish_netns(f"/var/run/netns/{pod}", taken)
    [back] = ip_j("link", "show", "dev", f"dev{inside['ifindex']}")
    assert back["address"] == inside["address"]
    assert pod not in netns_names()
