# SPDX-License-Identifier: Apache-2.0
"""The sim runtime builds netconfs and chains results the way libcni does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from railyard_sim.runtime import Attachment, PluginError, Runtime

pytestmark = pytest.mark.integration

# A plugin that logs what it received and answers: ADD appends an interface
# named after its type to prevResult; a config key "fail" makes it error.
FAKE = f"""#!{sys.executable}
import json, os, sys
conf = json.load(sys.stdin)
name = os.path.basename(sys.argv[0])
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"type": name, "cmd": os.environ["CNI_COMMAND"],
        "conf": conf, "args": os.environ.get("CNI_ARGS"),
        "ifname": os.environ.get("CNI_IFNAME"),
        "path": os.environ.get("CNI_PATH")}}) + "\\n")
if conf.get("fail"):
    print(json.dumps({{"cniVersion": conf["cniVersion"], "code": 107,
                      "msg": "refused", "details": "because"}}))
    sys.stderr.write("log line\\n")
    sys.exit(1)
if os.environ["CNI_COMMAND"] == "ADD":
    prev = conf.get("prevResult") or {{"cniVersion": conf["cniVersion"],
                                       "interfaces": []}}
    prev["interfaces"].append({{"name": name}})
    print(json.dumps(prev))
"""


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    for name in ("first", "second"):
        p = d / name
        p.write_text(FAKE)
        p.chmod(0o755)
    return d


def calls(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]


def conflist(version: str, fail: bool = False) -> dict:
    return {
        "cniVersion": version,
        "name": "net-a",
        "plugins": [
            {"type": "first", "capabilities": {"mac": True}, "k": 1},
            {"type": "second", "fail": fail},
        ],
    }


@pytest.fixture
def rt(bin_dir: Path, tmp_path: Path) -> Runtime:
    return Runtime(
        [bin_dir], env={"FAKE_LOG": str(tmp_path / "log")}, cache_dir=tmp_path / "cache"
    )


ATT = Attachment(
    "ctr1",
    "/var/run/netns/x",
    "net1",
    args={"K8S_POD_NAME": "p"},
    capability_args={"mac": "02:00:00:00:00:01", "ips": ["10.0.0.1/24"]},
)


def test_add_passes_each_result_as_the_next_prev_result(
    rt: Runtime, tmp_path: Path
) -> None:
    result = rt.add(conflist("1.0.0"), ATT)
    assert [i["name"] for i in result["interfaces"]] == ["first", "second"]
    first, second = calls(tmp_path)
    assert "prevResult" not in first["conf"]
    assert second["conf"]["prevResult"]["interfaces"] == [{"name": "first"}]
    assert first["conf"]["name"] == second["conf"]["name"] == "net-a"
    assert first["args"] == "K8S_POD_NAME=p" and first["ifname"] == "net1"


def test_runtime_config_only_carries_declared_capabilities(
    rt: Runtime, tmp_path: Path
) -> None:
    rt.add(conflist("1.0.0"), ATT)
    first, second = calls(tmp_path)
    assert first["conf"]["runtimeConfig"] == {"mac": "02:00:00:00:00:01"}
    assert "capabilities" not in first["conf"]
    assert "runtimeConfig" not in second["conf"]


@pytest.mark.parametrize(("version", "sends_prev"), [("0.3.1", False), ("1.0.0", True)])
def test_del_runs_in_reverse_with_the_cached_result_from_0_4_0(
    rt: Runtime, tmp_path: Path, version: str, sends_prev: bool
) -> None:
    rt.add(conflist(version), ATT)
    rt.delete(conflist(version), ATT)
    dels = [c for c in calls(tmp_path) if c["cmd"] == "DEL"]
    assert [c["type"] for c in dels] == ["second", "first"]
    assert all(("prevResult" in c["conf"]) is sends_prev for c in dels)
    assert not list((tmp_path / "cache").iterdir())


def test_plugin_error_json_becomes_plugin_error(rt: Runtime) -> None:
    with pytest.raises(PluginError) as caught:
        rt.add(conflist("1.0.0", fail=True), ATT)
    err = caught.value
    assert (err.plugin, err.command, err.code) == ("second", "ADD", 107)
    assert (err.msg, err.details) == ("refused", "because")
    assert err.stderr == "log line\n"


def test_failed_del_keeps_the_cached_result_for_the_retry(
    rt: Runtime, tmp_path: Path
) -> None:
    rt.add(conflist("1.0.0"), ATT)
    with pytest.raises(PluginError):
        rt.delete(conflist("1.0.0", fail=True), ATT)
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_cni_path_lists_the_bin_dirs(
    rt: Runtime, tmp_path: Path, bin_dir: Path
) -> None:
    rt.add(conflist("1.0.0"), ATT)
    assert calls(tmp_path)[0]["path"] == str(bin_dir)


def test_gc_sends_the_valid_attachments_to_every_plugin(
    rt: Runtime, tmp_path: Path
) -> None:
    rt.gc(conflist("1.1.0"), [("ctr1", "net1")])
    gcs = calls(tmp_path)
    assert [c["type"] for c in gcs] == ["first", "second"]
    assert all(c["cmd"] == "GC" for c in gcs)
    assert gcs[0]["conf"]["cni.dev/valid-attachments"] == [
        {"containerID": "ctr1", "ifname": "net1"}
    ]
    assert gcs[0]["ifname"] is None  # no attachment env for GC
