# SPDX-License-Identifier: Apache-2.0
"""The runner itself behaves like libcni (so the spec cases can trust it).

Two witnesses: Debian's Go plugins in a real chain (host-device with host-local
IPAM, then tuning), and a recording plugin - a tiny script that stores the
stdin and environment it was given and answers with its prevResult - which
shows exactly what a runtime hands each plugin.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from conformance import netns
from conformance.runner import PluginError, Runner, RuntimeConf, gc_attachment

pytestmark = pytest.mark.integration

REFERENCE = Path(os.environ.get("CONFORMANCE_REFERENCE_CNI_DIR", "/usr/lib/cni"))

RECORDER = """#!{python}
import json, os, sys
me = os.path.basename(sys.argv[0])
cmd = os.environ["CNI_COMMAND"]
conf = json.load(sys.stdin) if cmd != "VERSION" else {{}}
env = {{k: v for k, v in os.environ.items() if k.startswith("CNI_")}}
with open(os.path.join({logdir!r}, "calls.jsonl"), "a") as f:
    f.write(json.dumps({{"me": me, "env": env, "conf": conf}}) + "\\n")
if cmd == "VERSION":
    versions = ["1.0.0", "1.1.0"]
    print(json.dumps({{"cniVersion": "1.1.0", "supportedVersions": versions}}))
elif cmd == "ADD":
    empty = {{"cniVersion": conf["cniVersion"], "interfaces": [], "ips": []}}
    prev = conf.get("prevResult") or empty
    prev["interfaces"] = prev.get("interfaces", []) + [{{"name": me}}]
    print(json.dumps(prev))
"""


@pytest.fixture
def recorders(tmp_path: Path) -> tuple[Runner, Path]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("rec-a", "rec-b"):
        path = bindir / name
        path.write_text(RECORDER.format(python=sys.executable, logdir=str(tmp_path)))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return Runner([bindir], tmp_path / "cache"), tmp_path / "calls.jsonl"


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


CHAIN = {
    "cniVersion": "1.1.0",
    "name": "rc-rec",
    "plugins": [
        {"type": "rec-a", "capabilities": {"mac": True, "ips": False}},
        {"type": "rec-b"},
    ],
}


def test_add_chains_prev_result_and_injects_only_declared_capabilities(recorders):
    runner, log = recorders
    rt = RuntimeConf(
        "cid1",
        "net1",
        "/var/run/netns/x",
        [("K8S_POD_NAME", "p")],
        {"mac": "02:00:00:00:00:01", "ips": ["10.0.0.1/24"], "deviceID": "x"},
    )
    result = runner.add_list(CHAIN, rt)
    a, b = calls(log)
    assert (a["me"], b["me"]) == ("rec-a", "rec-b")
    assert a["conf"]["runtimeConfig"] == {"mac": "02:00:00:00:00:01"}  # ips disabled
    assert "runtimeConfig" not in b["conf"]  # declared nothing
    assert "prevResult" not in a["conf"]
    assert b["conf"]["prevResult"]["interfaces"] == [{"name": "rec-a"}]
    assert a["conf"]["name"] == b["conf"]["name"] == "rc-rec"
    assert a["conf"]["cniVersion"] == b["conf"]["cniVersion"] == "1.1.0"
    assert a["env"]["CNI_ARGS"] == "K8S_POD_NAME=p"
    assert [i["name"] for i in result["interfaces"]] == ["rec-a", "rec-b"]


def test_check_and_del_get_cached_result_and_del_runs_in_reverse(recorders):
    runner, log = recorders
    rt = RuntimeConf("cid2", "net1", "/var/run/netns/x")
    result = runner.add_list(CHAIN, rt)
    log.unlink()
    runner.check_list(CHAIN, rt)
    runner.del_list(CHAIN, rt)
    seen = [
        (c["env"]["CNI_COMMAND"], c["me"], c["conf"].get("prevResult"))
        for c in calls(log)
    ]
    assert seen == [
        ("CHECK", "rec-a", result),
        ("CHECK", "rec-b", result),
        ("DEL", "rec-b", result),
        ("DEL", "rec-a", result),
    ]
    assert runner.cached_result("rc-rec", rt) is None  # DEL dropped the cache


def test_gc_deletes_forgotten_attachments_then_sends_valid_list(recorders):
    runner, log = recorders
    keep, stale = RuntimeConf("keep", "net1", "/x"), RuntimeConf("stale", "net1", "/y")
    runner.add_list(CHAIN, keep)
    runner.add_list(CHAIN, stale)
    log.unlink()
    assert runner.gc_list(CHAIN, [gc_attachment("keep", "net1")]) == []
    seen = [
        (c["env"]["CNI_COMMAND"], c["me"], c["env"].get("CNI_CONTAINERID"))
        for c in calls(log)
    ]
    assert seen == [
        ("DEL", "rec-b", "stale"),
        ("DEL", "rec-a", "stale"),
        ("GC", "rec-a", None),
        ("GC", "rec-b", None),
    ]
    gc_conf = calls(log)[-1]["conf"]
    assert gc_conf["cni.dev/valid-attachments"] == [
        {"containerID": "keep", "ifname": "net1"}
    ]
    assert [a["containerId"] for a in runner.cached_attachments("rc-rec")] == ["keep"]


def test_status_runs_every_plugin_without_attachment_env(recorders):
    runner, log = recorders
    runner.status_list(CHAIN)
    assert [c["env"]["CNI_COMMAND"] for c in calls(log)] == ["STATUS", "STATUS"]
    assert all("CNI_CONTAINERID" not in c["env"] for c in calls(log))


@pytest.mark.skipif(
    not (REFERENCE / "tuning").exists(), reason="Debian CNI plugins missing"
)
def test_go_chain_add_check_del_through_the_runner(tmp_path: Path):
    """host-device(+host-local) -> tuning, run exactly as libcni would."""
    host, pod = netns.add_netns("h"), netns.add_netns("p")
    device = netns.unique("d")
    try:
        netns.ip(
            "link",
            "add",
            device,
            "type",
            "veth",
            "peer",
            "name",
            netns.unique("e"),
            netns=host,
        )
        runner = Runner(
            [REFERENCE], tmp_path / "cache", exec_prefix=netns.exec_prefix(host)
        )
        conflist = {
            "cniVersion": "1.0.0",
            "name": "rc-chain",
            "plugins": [
                {
                    "type": "host-device",
                    "device": device,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(tmp_path / "ipam"),
                        "ranges": [[{"subnet": "10.231.9.0/24"}]],
                    },
                },
                {"type": "tuning", "capabilities": {"mac": True}},
            ],
        }
        rt = RuntimeConf(
            "c1",
            "net1",
            netns.netns_path(pod),
            capability_args={"mac": "02:aa:bb:cc:dd:01"},
        )
        result = runner.add_list(conflist, rt)
        # tuning saw prevResult (it set the MAC the runtime passed as a capability)
        # and passed host-device's result on, address included.
        pod_links = netns.links(pod)
        assert pod_links["net1"]["address"] == "02:aa:bb:cc:dd:01"
        assert netns.addresses("net1", pod) == [result["ips"][0]["address"]]
        runner.check_list(conflist, rt)
        runner.del_list(conflist, rt)
        assert "net1" not in netns.links(pod)
        assert device in netns.links(host)
        with pytest.raises(PluginError) as err:  # CHECK after DEL must notice
            runner.check_list(
                conflist, RuntimeConf("c1", "net1", netns.netns_path(pod))
            )
        assert err.value.error is not None
    finally:
        netns.del_netns(pod)
        netns.del_netns(host)
