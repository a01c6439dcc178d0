# SPDX-License-Identifier: Apache-2.0
"""The sim runtime chains real plugins: Debian's host-device + host-local + tuning."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from railyard_sim.lab import Lab, link_names
from railyard_sim.runtime import DEBIAN_BIN, Attachment, PluginError, Runtime

pytestmark = [pytest.mark.kernel, pytest.mark.integration]

needs_debian_plugins = pytest.mark.skipif(
    not (DEBIAN_BIN / "host-device").exists(), reason="containernetworking-plugins"
)


def conflist(lab: Lab, data_dir: Path, device: str, version: str) -> dict:
    rail = lab.rail(1)
    return {
        "cniVersion": version,
        "name": "rsnet",
        "plugins": [
            {
                "type": "host-device",
                "device": device,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(data_dir),
                    "ranges": [
                        [
                            {
                                "subnet": rail.subnet_v4,
                                "rangeStart": "172.16.11.10",
                                "rangeEnd": "172.16.11.20",
                                "gateway": rail.gateway_v4,
                            }
                        ]
                    ],
                },
            },
            {"type": "tuning", "mtu": 4000, "capabilities": {"mac": True}},
        ],
    }


def ip_j(*args: str) -> list[dict]:
    out = subprocess.run(
        ["ip", "-j", *args], capture_output=True, text=True, check=False
    ).stdout
    return json.loads(out) if out.strip() else []


@needs_debian_plugins
@pytest.mark.parametrize("version", ["0.3.1", "1.0.0"])
def test_add_chains_prev_result_and_del_runs_in_reverse(
    lab: Lab, tmp_path: Path, other_netns: Callable[[], str], version: str
) -> None:
    pod = other_netns()
    vf = lab.rail(1).vfs[0].netdev
    conf = conflist(lab, tmp_path / "ipam", vf, version)
    rt = Runtime([DEBIAN_BIN], cache_dir=tmp_path / "cache")
    att = Attachment(
        "rsctr1", pod, "net1", capability_args={"mac": "02:00:00:00:11:01"}
    )
    result = rt.add(conf, att)
    assert result["cniVersion"] == version
    assert result["ips"][0]["address"] == "172.16.11.10/24"
    [link] = ip_j("-n", Path(pod).name, "link", "show", "dev", "net1")
    assert link["mtu"] == 4000  # tuning ran on host-device's result
    assert link["address"] == "02:00:00:00:11:01"  # runtimeConfig reached tuning
    assert vf not in link_names()

    rt.delete(conf, att)
    assert vf in link_names()
    assert ip_j("-n", Path(pod).name, "link", "show", "dev", "net1") == []
    assert not list((tmp_path / "cache").iterdir())


@needs_debian_plugins
def test_plugin_error_carries_the_cni_error_json(
    lab: Lab, tmp_path: Path, other_netns: Callable[[], str]
) -> None:
    pod = other_netns()
    conf = conflist(lab, tmp_path / "ipam", "rsnosuchdev0", "1.0.0")
    with pytest.raises(PluginError) as caught:
        Runtime([DEBIAN_BIN]).add(conf, Attachment("rsctr2", pod, "net1"))
    err = caught.value
    assert err.plugin == "host-device" and err.command == "ADD"
    assert err.code != 0 and err.msg


@needs_debian_plugins
def test_version_and_missing_plugin(tmp_path: Path) -> None:
    rt = Runtime([DEBIAN_BIN])
    assert "1.0.0" in rt.version("host-device")["supportedVersions"]
    with pytest.raises(FileNotFoundError, match="sriov-nope"):
        rt.version("sriov-nope")
