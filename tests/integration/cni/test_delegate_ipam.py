# SPDX-License-Identifier: Apache-2.0
"""cni.ipam.delegate against Debian's real host-local and a recording fake.

host-local only writes below the ``dataDir`` each test gives it (tmp_path);
no root or netns is needed.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from cni.ipam import Attachment, IpamClient, IpamError, IpamRequest
from cni.ipam.delegate import DelegateIpam, find_in_path

pytestmark = pytest.mark.integration

CNI_BIN = "/usr/lib/cni"
HOST_LOCAL = Path(CNI_BIN) / "host-local"
needs_host_local = pytest.mark.skipif(
    not HOST_LOCAL.exists(), reason="containernetworking-plugins not installed"
)
# Debian 12's host-local stops at 1.0.0; every version it shares with us.
HOST_LOCAL_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"]


def host_local_conf(data_dir: Path, version: str = "1.0.0", **ipam: Any) -> dict:
    conf = {
        "cniVersion": version,
        "name": "rail1",
        "type": "sriov",
        "deviceID": "0000:3b:02.1",
        "ipam": {
            "type": "host-local",
            "dataDir": str(data_dir),
            "ranges": [
                [
                    {
                        "subnet": "172.16.11.0/24",
                        "rangeStart": "172.16.11.1",
                        "rangeEnd": "172.16.11.200",
                        "gateway": "172.16.11.254",
                    }
                ],
                [
                    {
                        "subnet": "fd00:11::/64",
                        "rangeStart": "fd00:11::10",
                        "rangeEnd": "fd00:11::20",
                        "gateway": "fd00:11::fe",
                    }
                ],
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
        },
    }
    conf["ipam"].update(ipam)
    return conf


def env(**extra: str) -> dict[str, str]:
    base = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "3f2a8c1d9e00",
        "CNI_NETNS": "/var/run/netns/rc-pod",
        "CNI_IFNAME": "net1",
        "CNI_PATH": f"/nonexistent:{CNI_BIN}",
        "PATH": "/usr/bin:/bin",
    }
    base.update(extra)
    return base


def req(cid: str = "3f2a8c1d9e00", ifname: str = "net1") -> IpamRequest:
    return IpamRequest(network="rail1", container_id=cid, ifname=ifname)


def test_delegate_satisfies_the_ipam_client_protocol(tmp_path):
    client: IpamClient = DelegateIpam(host_local_conf(tmp_path), env())
    assert callable(client.allocate) and callable(client.close)


# ------------------------------------------------------------ host-local


@needs_host_local
@pytest.mark.parametrize("version", HOST_LOCAL_VERSIONS)
def test_host_local_allocates_dual_stack_with_gateways(tmp_path, version):
    ipam = DelegateIpam(host_local_conf(tmp_path, version), env())
    res = ipam.allocate(req())
    assert [(a.address, a.gateway, a.version) for a in res.ips] == [
        ("172.16.11.1/24", "172.16.11.254", 4),
        ("fd00:11::10/64", "fd00:11::fe", 6),
    ]
    assert [(r.dst, r.gw) for r in res.routes] == [("0.0.0.0/0", None), ("::/0", None)]
    assert ipam.last_result is not None
    assert ipam.last_result.cni_version == version
    # host-local records the owner under dataDir/<network>/<ip>.
    owner = (tmp_path / "rail1" / "172.16.11.1").read_text().split()
    assert owner[0] == "3f2a8c1d9e00"


@needs_host_local
def test_host_local_gives_distinct_addresses_per_attachment(tmp_path):
    ipam = DelegateIpam(host_local_conf(tmp_path), env())
    first = ipam.allocate(req("c1"))
    second = ipam.allocate(req("c2"))
    assert first.ips[0].address != second.ips[0].address


@needs_host_local
def test_host_local_release_frees_the_address_and_is_idempotent(tmp_path):
    ipam = DelegateIpam(host_local_conf(tmp_path), env())
    ipam.allocate(req("c1"))
    assert (tmp_path / "rail1" / "172.16.11.1").exists()
    ipam.release("rail1", "c1", "net1")
    assert not (tmp_path / "rail1" / "172.16.11.1").exists()
    ipam.release("rail1", "c1", "net1")


@needs_host_local
def test_call_arguments_override_the_env_attachment(tmp_path):
    ipam = DelegateIpam(host_local_conf(tmp_path), env(CNI_CONTAINERID="other"))
    ipam.allocate(req("c9", "net3"))
    assert (tmp_path / "rail1" / "172.16.11.1").read_text().split() == ["c9", "net3"]


@needs_host_local
def test_host_local_exhaustion_maps_its_error_json_to_ipam_error(tmp_path):
    conf = host_local_conf(tmp_path)
    conf["ipam"]["ranges"] = [
        [{"subnet": "10.9.0.0/24", "rangeStart": "10.9.0.5", "rangeEnd": "10.9.0.5"}]
    ]
    ipam = DelegateIpam(conf, env())
    ipam.allocate(req("c1"))
    with pytest.raises(IpamError) as e:
        ipam.allocate(req("c2"))
    assert e.value.code == 999  # host-local's own (untyped) error code
    assert "no IP addresses available" in e.value.msg


@needs_host_local
def test_host_local_config_error_is_reported_with_its_message(tmp_path):
    conf = host_local_conf(tmp_path)
    del conf["ipam"]["ranges"]
    with pytest.raises(IpamError) as e:
        DelegateIpam(conf, env()).allocate(req())
    assert e.value.msg == "no IP ranges specified"


@needs_host_local
def test_host_local_check_passes_for_the_allocated_prev_result(tmp_path):
    ipam = DelegateIpam(host_local_conf(tmp_path, "1.0.0"), env())
    ipam.allocate(req())
    assert ipam.last_result is not None
    conf = host_local_conf(
        tmp_path,
        "1.0.0",
    )
    conf["prevResult"] = ipam.last_result.to_json("1.0.0")
    checked = DelegateIpam(conf, env()).check("rail1", "3f2a8c1d9e00", "net1")
    assert [a.address for a in checked.ips] == ["172.16.11.1/24", "fd00:11::10/64"]


@needs_host_local
def test_host_local_check_fails_for_an_address_it_never_gave(tmp_path):
    conf = host_local_conf(tmp_path, "1.0.0")
    conf["prevResult"] = {
        "cniVersion": "1.0.0",
        "ips": [{"address": "172.16.11.77/24", "gateway": "172.16.11.254"}],
    }
    with pytest.raises(IpamError):
        DelegateIpam(conf, env()).check("rail1", "3f2a8c1d9e00", "net1")


@needs_host_local
def test_gc_and_status_are_skipped_for_a_delegate_without_1_1_0(tmp_path):
    ipam = DelegateIpam(host_local_conf(tmp_path, "1.1.0"), env())
    assert "1.1.0" not in ipam.supported_versions()
    ipam.status()
    assert ipam.gc("rail1", []) == 0


@needs_host_local
def test_delegate_version_is_read_from_the_binary(tmp_path):
    versions = DelegateIpam(host_local_conf(tmp_path), env()).supported_versions()
    assert {"0.4.0", "1.0.0"} <= set(versions)


# ----------------------------------------------------- recording fake IPAM


FAKE = """#!/bin/sh
# Records what it was given, then behaves as $FAKE_MODE says.
{ env | grep '^CNI_' | sort; echo '--- stdin'; cat; echo; } > "$FAKE_LOG.$CNI_COMMAND"
case "$CNI_COMMAND" in
  VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}';;
  ADD)
    case "$FAKE_MODE" in
      crash) echo "panic: runtime error" >&2; exit 2;;
      garbage) echo "not json";;
      empty) ;;
      slow) sleep 5;;
      *) echo '{"cniVersion":"1.1.0","ips":[{"address":"10.1.0.9/16",
           "gateway":"10.1.0.1"}],"routes":[{"dst":"0.0.0.0/0","table":7}],
           "dns":{"nameservers":["10.1.0.53"]}}';;
    esac;;
  STATUS)
    if [ "$FAKE_MODE" = down ]; then
      echo '{"code":50,"msg":"pool unreachable","details":"dial: refused"}'; exit 1
    fi;;
esac
"""


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    script = d / "fake-ipam"
    script.write_text(FAKE)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return d


def fake(tmp_path: Path, fake_bin: Path, mode: str = "", version: str = "1.1.0"):
    conf = {
        "cniVersion": version,
        "name": "rail1",
        "type": "sriov",
        "ipam": {"type": "fake-ipam", "pool": "a"},
        "runtimeConfig": {"ips": ["10.1.0.9/16"]},
    }
    e = env(
        CNI_PATH=f"{tmp_path}/empty:{fake_bin}",
        CNI_ARGS="IgnoreUnknown=1",
        FAKE_LOG=str(tmp_path / "log"),
        FAKE_MODE=mode,
    )
    return DelegateIpam(conf, e, timeout=1.0), conf


def logged(tmp_path: Path, command: str) -> tuple[dict[str, str], dict]:
    text = (tmp_path / f"log.{command}").read_text()
    env_part, stdin_part = text.split("--- stdin\n")
    env_vars = dict(line.split("=", 1) for line in env_part.splitlines())
    return env_vars, (json.loads(stdin_part) if stdin_part.strip() else {})


def test_add_gets_same_env_and_whole_config(tmp_path, fake_bin):
    ipam, conf = fake(tmp_path, fake_bin)
    res = ipam.allocate(req("c7", "net2"))
    seen_env, seen_conf = logged(tmp_path, "ADD")
    assert seen_conf == conf
    assert seen_env["CNI_COMMAND"] == "ADD"
    assert (seen_env["CNI_CONTAINERID"], seen_env["CNI_IFNAME"]) == ("c7", "net2")
    assert seen_env["CNI_NETNS"] == "/var/run/netns/rc-pod"
    assert seen_env["CNI_ARGS"] == "IgnoreUnknown=1"
    assert seen_env["CNI_PATH"].endswith(str(fake_bin))
    assert [(a.address, a.gateway) for a in res.ips] == [("10.1.0.9/16", "10.1.0.1")]
    assert res.dns == {"nameservers": ["10.1.0.53"]}
    assert ipam.last_result is not None and ipam.last_result.routes[0].table == 7


def test_gc_passes_the_valid_attachments(tmp_path, fake_bin):
    ipam, _ = fake(tmp_path, fake_bin)
    assert ipam.gc("rail1", [Attachment("c1", "net1"), Attachment("c2", "net4")]) == 0
    seen_env, seen_conf = logged(tmp_path, "GC")
    assert seen_env["CNI_COMMAND"] == "GC"
    assert seen_conf["cni.dev/valid-attachments"] == [
        {"containerID": "c1", "ifname": "net1"},
        {"containerID": "c2", "ifname": "net4"},
    ]


def test_gc_is_not_run_for_a_config_older_than_1_1_0(tmp_path, fake_bin):
    ipam, _ = fake(tmp_path, fake_bin, version="1.0.0")
    ipam.gc("rail1", [])
    ipam.status()
    assert not (tmp_path / "log.GC").exists()
    assert not (tmp_path / "log.STATUS").exists()


def test_status_error_keeps_the_delegates_code(tmp_path, fake_bin):
    ipam, _ = fake(tmp_path, fake_bin, "down")
    with pytest.raises(IpamError) as e:
        ipam.status()
    assert (e.value.code, e.value.msg, e.value.details) == (
        50,
        "pool unreachable",
        "dial: refused",
    )


def test_status_ok_when_the_delegate_prints_nothing(tmp_path, fake_bin):
    ipam, _ = fake(tmp_path, fake_bin)
    ipam.status()
    assert logged(tmp_path, "STATUS")[0]["CNI_COMMAND"] == "STATUS"


def test_release_and_check_run_del_and_check(tmp_path, fake_bin):
    ipam, _ = fake(tmp_path, fake_bin)
    ipam.release("rail1", "c1", "net1")
    assert ipam.check("rail1", "c1", "net1").ips == []
    assert logged(tmp_path, "DEL")[0]["CNI_CONTAINERID"] == "c1"
    assert logged(tmp_path, "CHECK")[0]["CNI_COMMAND"] == "CHECK"


def test_crash_without_json_is_code_101_with_stderr(tmp_path, fake_bin):
    ipam, _ = fake(tmp_path, fake_bin, "crash")
    with pytest.raises(IpamError) as e:
        ipam.allocate(req())
    assert e.value.code == 101
    assert "panic: runtime error" in e.value.details
    assert "exited 2" in e.value.details


@pytest.mark.parametrize("mode", ["garbage", "empty"])
def test_add_without_a_usable_result_is_code_101(tmp_path, fake_bin, mode):
    ipam, _ = fake(tmp_path, fake_bin, mode)
    with pytest.raises(IpamError) as e:
        ipam.allocate(req())
    assert e.value.code == 101


def test_hung_delegate_is_killed_after_its_timeout(tmp_path, fake_bin):
    ipam, _ = fake(tmp_path, fake_bin, "slow")
    ipam.timeout = 0.3
    with pytest.raises(IpamError) as e:
        ipam.allocate(req())
    assert "timed out" in e.value.msg


def test_missing_plugin_names_the_search_path(tmp_path):
    conf = {"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "whereabouts"}}
    ipam = DelegateIpam(conf, env(CNI_PATH=f"{tmp_path}:{tmp_path}/x"))
    with pytest.raises(IpamError) as e:
        ipam.allocate(req())
    assert e.value.code == 101
    assert e.value.msg == (
        f'failed to find plugin "whereabouts" in path [{tmp_path} {tmp_path}/x]'
    )


@pytest.mark.parametrize("ipam", [None, {}, {"type": 3}])
def test_config_without_ipam_type_is_code_7(ipam):
    conf = {"cniVersion": "1.0.0", "name": "n", "ipam": ipam}
    with pytest.raises(IpamError) as e:
        DelegateIpam(conf, env())
    assert e.value.code == 7


@pytest.mark.parametrize("plugin", ["../bin/sh", "/bin/sh", ".."])
def test_ipam_type_cannot_point_outside_cni_path(plugin):
    with pytest.raises(IpamError) as e:
        find_in_path(plugin, [CNI_BIN])
    assert e.value.code == 7


def test_non_executable_file_is_not_a_plugin(tmp_path):
    (tmp_path / "host-local").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "host-local", 0o644)
    with pytest.raises(IpamError):
        find_in_path("host-local", [str(tmp_path)])
