# SPDX-License-Identifier: Apache-2.0
"""What each real client hands a plugin process, observed with a spy plugin.

Our plugins find their state dir and ipamd through environment variables
(RAILYARD_STATE_DIR, RAILYARD_IPAMD_SOCKET). These tests pin, per client,
whether and how the environment reaches ADD *and* DEL, and what CNI_NETNS the
DEL carries; the plugin is a shell spy that logs and then execs Debian's Go
``host-device`` (a veth end of ours stands in for the VF), so they need none
of our code.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import netview
from .commands import run
from .runtimes import IMAGE

pytestmark = pytest.mark.integration

MARK = "RP_SPY_MARK"

SPY = """#!/bin/sh
# logs what the runtime passed, then behaves as Debian's host-device
{{ echo "=== $CNI_COMMAND"; env | grep -E "^(CNI_|RP_SPY_)" | sort; }} >> {log}
exec /usr/lib/cni/host-device
"""


class Spy:
    def __init__(self, workdir: Path) -> None:
        self.bin_dir = workdir / "spybin"
        self.bin_dir.mkdir()
        self.log = workdir / "spy.log"
        script = self.bin_dir / "rpspy"
        script.write_text(SPY.format(log=self.log))
        script.chmod(0o755)
        self.device = f"rp{uuid.uuid4().hex[:8]}"

    def conflist(self, name: str) -> dict[str, object]:
        return {
            "cniVersion": "1.0.0",
            "name": name,
            "plugins": [
                {
                    "type": "rpspy",
                    "device": self.device,
                    "ipam": {
                        "type": "static",
                        "addresses": [{"address": "192.0.2.10/24"}],
                    },
                }
            ],
        }

    def calls(self) -> dict[str, dict[str, str]]:
        """The env of the last call of each command (ADD, DEL, ...)."""
        out: dict[str, dict[str, str]] = {}
        current: dict[str, str] = {}
        for line in self.log.read_text().splitlines():
            if line.startswith("=== "):
                current = {}
                out[line[4:]] = current
            elif "=" in line:
                key, value = line.split("=", 1)
                current[key] = value
        return out


@pytest.fixture
def spy(tmp_short: Path) -> Iterator[Spy]:
    s = Spy(tmp_short)
    subprocess.run(
        ["ip", "link", "add", s.device, "type", "veth", "peer", "name", s.device + "p"],
        check=True,
    )
    try:
        yield s
    finally:
        # a veth moved into a container netns dies with it; ours otherwise
        subprocess.run(
            ["ip", "link", "del", s.device + "p"], check=False, capture_output=True
        )


def test_cnitool_passes_its_environment_to_add_and_del(
    cnitool: str, spy: Spy, rp_netns, tmp_short: Path
) -> None:
    netns = rp_netns()
    (tmp_short / "net.d").mkdir()
    (tmp_short / "net.d" / "spy.conflist").write_text(json.dumps(spy.conflist("rpspy")))
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        MARK: "cnitool",
        "NETCONFPATH": str(tmp_short / "net.d"),
        "CNI_PATH": f"{spy.bin_dir}:/usr/lib/cni",
        "CNI_IFNAME": "net1",
    }
    try:
        run([cnitool, "add", "rpspy", netns], env=env)
        assert netview.nic("net1", netns).ipv4 == ("192.0.2.10/24",)
    finally:
        # also when ADD's checks failed: libcni's cache in /var/lib/cni/results
        run([cnitool, "del", "rpspy", netns], env=env)

    calls = spy.calls()
    assert calls["ADD"][MARK] == calls["DEL"][MARK] == "cnitool"
    assert calls["DEL"]["CNI_NETNS"] == netns
    assert netview.nic(spy.device) is not None  # host-device gave it back


def test_podman_passes_plugin_env_only_through_containers_conf(
    make_podman, spy: Spy
) -> None:
    # The caller's MARK reaches ADD (podman run execs the plugin itself), but DEL
    # runs in `podman container cleanup`, started by conmon with a scrubbed
    # environment: only containers.conf [engine] env reaches both.
    podman = make_podman([spy.bin_dir], {"RP_SPY_ENGINE": "engine"})
    podman.add_network(spy.conflist("rpspy"))
    out = run(
        [
            "podman",
            "run",
            "--rm",
            "--network",
            "rpspy:interface_name=net1",
            IMAGE,
            "ip",
            "addr",
            "show",
            "net1",
        ],
        env={**podman.env, MARK: "caller"},
    )
    assert netview.busybox_addrs(out.stdout)["net1"].ipv4 == ("192.0.2.10/24",)

    calls = spy.calls()
    assert calls["ADD"]["RP_SPY_ENGINE"] == calls["DEL"]["RP_SPY_ENGINE"] == "engine"
    assert calls["ADD"][MARK] == "caller"
    assert MARK not in calls["DEL"]
    assert calls["DEL"]["CNI_NETNS"] == calls["ADD"]["CNI_NETNS"] != ""
    assert netview.nic(spy.device) is not None


def test_ctr_passes_its_environment_and_dels_with_an_empty_netns(
    containerd, spy: Spy, tmp_short: Path
) -> None:
    conf_dir = tmp_short / "ctr-net.d"
    conf_dir.mkdir()
    (conf_dir / "10-rpspy.conflist").write_text(json.dumps(spy.conflist("rpspy")))
    name = f"rp{uuid.uuid4().hex[:8]}"
    cmd = containerd.ctr_cni_cmd(
        conf_dir,
        spy.bin_dir,
        "run",
        "--rm",
        "--cni",
        IMAGE,
        name,
        "ip",
        "addr",
        "show",
        "eth0",
    )
    out = run(cmd, env={**os.environ, MARK: "ctr"})
    assert netview.busybox_addrs(out.stdout)["eth0"].ipv4 == ("192.0.2.10/24",)

    calls = spy.calls()
    assert calls["ADD"][MARK] == calls["DEL"][MARK] == "ctr"
    assert calls["ADD"]["CNI_CONTAINERID"] == f"{containerd.namespace}-{name}"
    assert calls["ADD"]["CNI_NETNS"].startswith("/proc/")
    # ctr deletes the task (and so the netns) first, then sends DEL
    assert calls["DEL"]["CNI_NETNS"] == ""
