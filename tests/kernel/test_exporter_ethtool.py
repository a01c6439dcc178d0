# SPDX-License-Identifier: Apache-2.0
"""The exporter's ethtool adapter against the real kernel: a veth in a netns.

veth answers ETHTOOL_GSTATS with a handful of statistics (``peer_ifindex``,
per-queue XDP counters) and ETHTOOL_GSET with 10000 Mb/s, enough to prove the
ioctls are issued in the pod's netns from the exporter's thread, which stays
in its own.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import pytest

from cni.kernel.ethtool import EthtoolStats

pytestmark = pytest.mark.kernel


def test_ethtool_reads_a_netdev_inside_a_pod_netns(
    make_netns: Callable[..., str],
) -> None:
    pod = make_netns("rkx")
    name = os.path.basename(pod)
    subprocess.run(
        ["ip", "-n", name, "link", "add", "net1", "type", "veth", "peer", "name", "p1"],
        check=True,
    )
    before = os.readlink("/proc/thread-self/ns/net")
    source = EthtoolStats()
    got = source.read(pod, ["net1", "absent0"])
    again = source.read(pod, ["net1"])  # names cached, values read again
    assert os.readlink("/proc/thread-self/ns/net") == before
    assert list(got) == ["net1"]
    assert "peer_ifindex" in got["net1"].stats
    assert got["net1"].speed_mbps == 10000
    assert again["net1"].stats.keys() == got["net1"].stats.keys()


def test_ethtool_of_a_deleted_netns_reads_nothing(
    make_netns: Callable[..., str],
) -> None:
    pod = make_netns("rkx")
    subprocess.run(["ip", "netns", "del", os.path.basename(pod)], check=True)
    assert EthtoolStats().read(pod, ["net1"]) == {}
