# SPDX-License-Identifier: Apache-2.0
"""What one warm sriov ADD and DEL cost in rtnetlink requests (issue 9).

Every request is a round trip through the kernel's rtnl lock, which a burst of
pods contends for, and a warm ADD must not cost more than the Go chain's: the
lifecycle carries the link it
already read to the next step instead of asking again, and these counts must
not grow back. Counted by the real adapter on the simulated host, in-process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cni.kernel.links import NetlinkLinks
from cni.plugins.sriov import commands
from tests.doubles.sriov_lab import Harness

pytestmark = pytest.mark.kernel

RTM_GETLINK = 18  # include/uapi/linux/rtnetlink.h


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    with Harness.up(tmp_path, rails=1) as harness:
        yield harness


def link_requests(h: Harness, command: str, pod: str) -> int:
    deps = h.deps()
    assert isinstance(deps.links, NetlinkLinks)
    funcs = h.funcs(commands, deps)
    args = h.args(command, h.conf(), pod, "net1", "c1")
    if command == "ADD":
        funcs.add(args)
    else:
        funcs.del_(args)
    return deps.links.requests[RTM_GETLINK]


def test_a_one_nic_add_asks_the_kernel_for_a_link_at_most_nine_times(
    h: Harness,
) -> None:
    # Was 11: the PF asked for twice, the pod's link read again right after
    # the step that had just read it, and after an "up" that changed nothing
    # else. (Rename, address and route changes still look the index up.)
    assert link_requests(h, "ADD", h.pod()) <= 9


def test_a_one_nic_del_asks_the_kernel_for_a_link_at_most_seven_times(
    h: Harness,
) -> None:
    pod = h.pod()
    link_requests(h, "ADD", pod)
    # Each route and the rename look the index up again (a step before found it).
    assert link_requests(h, "DEL", pod) <= 7
