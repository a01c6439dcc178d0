# SPDX-License-Identifier: Apache-2.0
"""cni.skel: env validation, version negotiation, output and error JSON.

Expected codes and messages are Go ``pkg/skel`` + ``pkg/utils`` ones, so a
runtime sees the same thing from us as from a Go plugin.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from cni import version
from cni.errors import CniError
from cni.ipam import Attachment, IpamError
from cni.rollback import Rollback
from cni.skel import (
    PluginFuncs,
    is_own_netns,
    validate_container_id,
    validate_ifname,
    validate_network_name,
)
from cni.types import Interface, IPConfig, Result, Route

from .conftest import Recorder, base_env, netconf

ALL = version.ALL


def sample_result() -> Result:
    return Result(
        interfaces=[
            Interface(
                "net1",
                "02:00:00:00:00:01",
                9000,
                "/var/run/netns/p1",
                pci_id="0000:3b:02.1",
            )
        ],
        ips=[
            IPConfig(
                ipaddress.ip_interface("172.16.11.5/24"),
                ipaddress.ip_address("172.16.11.254"),
                0,
            )
        ],
        routes=[Route(ipaddress.ip_network("0.0.0.0/0"), table=101)],
    )


# ----------------------------------------------------------------- VERSION


def test_version_prints_current_and_supported_versions_compactly(run_cni):
    r = run_cni({"CNI_COMMAND": "VERSION"})
    assert r.code == 0
    assert r.stdout == (
        '{"cniVersion":"1.1.0","supportedVersions":'
        '["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}\n'
    )


def test_version_ignores_stdin_even_when_it_is_garbage(run_cni, recorder):
    r = run_cni({"CNI_COMMAND": "VERSION"}, b"{not json")
    assert r.code == 0
    assert r.json["supportedVersions"] == list(ALL)
    assert recorder.calls == []


def test_version_lists_the_plugins_own_supported_versions(run_cni):
    r = run_cni({"CNI_COMMAND": "VERSION"}, supported_versions=("0.4.0", "1.0.0"))
    assert r.json == {"cniVersion": "1.1.0", "supportedVersions": ["0.4.0", "1.0.0"]}


@pytest.mark.parametrize("flag", ["-v", "--version"])
def test_version_flag_prints_the_about_string(run_cni, recorder, flag):
    r = run_cni({}, argv=[flag], about="railyard sriov 0.1.0")
    assert r.code == 0
    assert r.stdout.splitlines()[0] == "railyard sriov 0.1.0"
    assert "1.1.0" in r.stdout.splitlines()[1]
    assert recorder.calls == []


def test_no_cni_command_is_error_4_with_the_about_text_on_stderr(run_cni):
    # Go skel exits 0 here; the spec (and our conformance suite) want error 4.
    r = run_cni({}, about="railyard sriov 0.1.0")
    assert r.code == 1
    assert r.json["code"] == 4
    assert r.json["msg"] == "required env variables [CNI_COMMAND] missing"
    assert r.stderr.startswith("railyard sriov 0.1.0\n")
    assert "CNI protocol versions supported: 0.3.0, 0.3.1" in r.stderr


def test_no_cni_command_without_about_is_an_env_error(run_cni):
    r = run_cni({}, about="")
    assert r.code == 1
    assert r.json["code"] == 4
    assert r.json["msg"] == "required env variables [CNI_COMMAND] missing"


# ------------------------------------------------------------------- env


@pytest.mark.parametrize(
    ("command", "missing"),
    [
        ("ADD", "CNI_CONTAINERID"),
        ("ADD", "CNI_NETNS"),
        ("ADD", "CNI_IFNAME"),
        ("ADD", "CNI_PATH"),
        ("CHECK", "CNI_CONTAINERID"),
        ("CHECK", "CNI_NETNS"),
        ("CHECK", "CNI_IFNAME"),
        ("CHECK", "CNI_PATH"),
        ("DEL", "CNI_CONTAINERID"),
        ("DEL", "CNI_IFNAME"),
        ("DEL", "CNI_PATH"),
        ("GC", "CNI_PATH"),
        ("STATUS", "CNI_PATH"),
    ],
)
def test_missing_required_env_is_code_4_naming_the_variable(
    run_cni, recorder, command, missing
):
    env = base_env(command)
    del env[missing]
    r = run_cni(env, netconf("1.1.0"))
    assert r.code == 1
    assert r.json["code"] == 4
    assert r.json["msg"] == f"required env variables [{missing}] missing"
    assert recorder.calls == []


def test_empty_env_value_counts_as_missing(run_cni):
    r = run_cni(base_env("ADD", CNI_CONTAINERID=""), netconf())
    assert r.json["code"] == 4
    assert r.json["msg"] == "required env variables [CNI_CONTAINERID] missing"


def test_all_missing_variables_are_listed_in_go_order(run_cni):
    r = run_cni({"CNI_COMMAND": "ADD"}, netconf())
    assert r.json["msg"] == (
        "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"
    )


@pytest.mark.parametrize("command", ["DEL", "GC", "STATUS"])
def test_netns_is_optional_outside_add_and_check(run_cni, recorder, command):
    env = base_env(command)
    del env["CNI_NETNS"]
    r = run_cni(env, netconf("1.1.0", **{"cni.dev/valid-attachments": []}))
    assert r.code == 0, r.stdout
    assert recorder.names == [{"DEL": "del", "GC": "gc", "STATUS": "status"}[command]]


@pytest.mark.parametrize("command", ["GC", "STATUS"])
def test_gc_and_status_need_no_container_id_or_ifname(run_cni, recorder, command):
    env = {"CNI_COMMAND": command, "CNI_PATH": "/usr/lib/cni"}
    r = run_cni(env, netconf("1.1.0", **{"cni.dev/valid-attachments": []}))
    assert r.code == 0, r.stdout
    assert len(recorder.calls) == 1


def test_unknown_command_is_code_4(run_cni):
    r = run_cni(base_env("FROB"), netconf())
    assert r.json["code"] == 4
    assert r.json["msg"] == "unknown CNI_COMMAND: FROB"


@pytest.mark.parametrize("cid", ["-leading-dash", "has space", "a/b", "ünï", "x;y"])
def test_invalid_container_id_is_code_4_with_the_id_in_details(run_cni, cid):
    r = run_cni(base_env("ADD", CNI_CONTAINERID=cid), netconf())
    assert r.json["code"] == 4
    assert r.json["msg"] == "invalid characters in containerID"
    assert r.json["details"] == cid


def test_invalid_container_id_is_reported_before_later_missing_variables(run_cni):
    env = base_env("ADD", CNI_CONTAINERID="bad id")
    del env["CNI_PATH"]
    r = run_cni(env, netconf())
    assert r.json["msg"] == "invalid characters in containerID"


def test_env_errors_win_over_an_undecodable_config(run_cni):
    r = run_cni(base_env("ADD", CNI_IFNAME="a" * 20), b"{not json")
    assert r.json["code"] == 4


def test_unknown_command_is_reported_after_decoding_stdin_like_go(run_cni):
    r = run_cni(base_env("FROB"), b"{not json")
    assert r.json["code"] == 6


def test_empty_container_id_is_code_3_when_validated_directly():
    with pytest.raises(CniError) as e:
        validate_container_id("")
    assert (e.value.code, e.value.msg) == (3, "missing containerID")


@pytest.mark.parametrize(
    ("ifname", "msg"),
    [
        ("a" * 16, "interface name is too long"),
        (".", "interface name is . or .."),
        ("..", "interface name is . or .."),
        ("net/1", "interface name contains / or : or whitespace characters"),
        ("net:1", "interface name contains / or : or whitespace characters"),
        ("net 1", "interface name contains / or : or whitespace characters"),
        ("net\t1", "interface name contains / or : or whitespace characters"),
    ],
)
def test_invalid_ifname_is_code_4_with_go_message(run_cni, recorder, ifname, msg):
    r = run_cni(base_env("ADD", CNI_IFNAME=ifname), netconf())
    assert r.json["code"] == 4
    assert r.json["msg"] == msg
    assert recorder.calls == []


def test_ifname_of_fifteen_bytes_is_accepted(run_cni, recorder):
    r = run_cni(base_env("ADD", CNI_IFNAME="a" * 15), netconf())
    assert r.code == 0
    assert recorder.calls[0][1].ifname == "a" * 15


def test_ifname_length_counts_bytes_like_go():
    with pytest.raises(CniError, match="too long"):
        validate_ifname("é" * 8)  # 8 characters, 16 bytes


def test_ifname_validation_is_skipped_for_gc(run_cni, recorder):
    env = base_env("GC", CNI_IFNAME="bad/name")
    r = run_cni(env, netconf("1.1.0", **{"cni.dev/valid-attachments": []}))
    assert r.code == 0


# --------------------------------------------------------------- decoding


@pytest.mark.parametrize("stdin", [b"", b"{", b"not json", b"\xff\xfe"])
def test_undecodable_stdin_is_code_6(run_cni, stdin):
    r = run_cni(base_env("ADD"), stdin)
    assert r.json["code"] == 6
    assert r.json["msg"].startswith("error unmarshall network config:")


@pytest.mark.parametrize("stdin", [b"[]", b"42", b'"x"', b'{"name": 5}'])
def test_stdin_that_is_not_a_config_object_is_code_6(run_cni, stdin):
    r = run_cni(base_env("ADD"), stdin)
    assert r.json["code"] == 6


@pytest.mark.parametrize("conf", [{"cniVersion": "1.0.0"}, {"name": ""}])
def test_missing_network_name_is_code_7(run_cni, conf):
    r = run_cni(base_env("DEL"), conf)
    assert r.json["code"] == 7
    assert r.json["msg"] == "missing network name"


def test_network_name_with_bad_characters_is_code_7(run_cni):
    r = run_cni(base_env("ADD"), netconf(name="rail one"))
    assert r.json["code"] == 7
    assert r.json["msg"] == "invalid characters found in network name"
    assert r.json["details"] == "rail one"


def test_network_name_rules_match_go():
    validate_network_name("gpu1-net11_v6.a")
    with pytest.raises(CniError):
        validate_network_name("_leading")


def test_non_string_cni_version_is_code_6(run_cni):
    r = run_cni(base_env("ADD"), {"cniVersion": 1.0, "name": "n"})
    assert r.json["code"] == 6


def test_malformed_cni_version_is_code_6(run_cni):
    r = run_cni(base_env("ADD"), netconf("1.x.0"))
    assert r.json["code"] == 6


# ---------------------------------------------------- version negotiation


@pytest.mark.parametrize("conf_version", ["0.1.0", "0.2.0", "1.2.0", "2.0.0"])
def test_unsupported_config_version_is_code_1_with_go_details(run_cni, conf_version):
    r = run_cni(base_env("ADD"), netconf(conf_version))
    assert r.json["code"] == 1
    assert r.json["msg"] == "incompatible CNI versions"
    assert r.json["details"] == (
        f'config is "{conf_version}", plugin supports '
        '["0.3.0" "0.3.1" "0.4.0" "1.0.0" "1.1.0"]'
    )


def test_missing_cni_version_is_treated_as_0_1_0(run_cni):
    r = run_cni(base_env("ADD"), {"name": "rail1", "type": "sriov"})
    assert r.json["code"] == 1
    assert r.json["details"].startswith('config is "0.1.0"')


@pytest.mark.parametrize("conf_version", ["0.3.0", "0.3.1"])
def test_check_before_0_4_0_is_refused_with_code_1(run_cni, recorder, conf_version):
    r = run_cni(base_env("CHECK"), netconf(conf_version))
    assert r.json["code"] == 1
    assert r.json["msg"] == "config version does not allow CHECK"
    assert recorder.calls == []


@pytest.mark.parametrize("conf_version", ["0.4.0", "1.0.0", "1.1.0"])
def test_check_from_0_4_0_calls_the_plugin_and_prints_nothing(
    run_cni, recorder, conf_version
):
    recorder.add_result = sample_result()
    r = run_cni(base_env("CHECK"), netconf(conf_version))
    assert r.code == 0
    assert r.stdout == ""
    assert recorder.names == ["check"]


def test_check_when_plugin_only_supports_older_versions_is_code_1(run_cni):
    r = run_cni(base_env("CHECK"), netconf("0.4.0"), supported_versions=("0.3.1",))
    assert r.json["code"] == 1
    assert r.json["msg"] == "plugin version does not allow CHECK"


@pytest.mark.parametrize("command", ["GC", "STATUS"])
@pytest.mark.parametrize("conf_version", [v for v in ALL if v != "1.1.0"])
def test_gc_and_status_before_1_1_0_are_refused_with_code_1(
    run_cni, recorder, command, conf_version
):
    conf = netconf(conf_version, **{"cni.dev/valid-attachments": []})
    r = run_cni(base_env(command), conf)
    assert r.json["code"] == 1
    assert r.json["msg"] == f"config version does not allow {command}"
    assert recorder.calls == []


@pytest.mark.parametrize("conf_version", ALL)
@pytest.mark.parametrize("command", ["ADD", "DEL"])
def test_add_and_del_run_at_every_supported_version(
    run_cni, recorder, command, conf_version
):
    r = run_cni(base_env(command), netconf(conf_version))
    assert r.code == 0, r.stdout
    assert recorder.names == [command.lower()]


# ------------------------------------------------------------------ netns


def test_add_into_the_plugins_own_netns_is_code_8(run_cni, recorder):
    r = run_cni(base_env("ADD", CNI_NETNS="/proc/self/ns/net"), netconf())
    assert r.json["code"] == 8
    assert r.json["msg"] == (
        "plugin's netns and netns from CNI_NETNS should not be the same"
    )
    assert recorder.calls == []


def test_check_into_the_plugins_own_netns_is_code_8(run_cni):
    r = run_cni(base_env("CHECK", CNI_NETNS="/proc/self/ns/net"), netconf())
    assert r.json["code"] == 8


@pytest.mark.parametrize("override", ["1", "true", "TRUE", "True"])
def test_netns_override_allows_the_plugins_own_netns(run_cni, recorder, override):
    env = base_env("ADD", CNI_NETNS="/proc/self/ns/net", CNI_NETNS_OVERRIDE=override)
    r = run_cni(env, netconf())
    assert r.code == 0
    assert recorder.calls[0][1].netns_override is True


def test_del_in_the_plugins_own_netns_is_refused_before_the_plugin_runs(
    run_cni, recorder
):
    # Go skel returns 8 for DEL too, but only after the DEL ran in the host.
    r = run_cni(base_env("DEL", CNI_NETNS="/proc/self/ns/net"), netconf())
    assert r.json["code"] == 8
    assert recorder.calls == []


def test_del_with_empty_netns_runs(run_cni, recorder):
    r = run_cni(base_env("DEL", CNI_NETNS=""), netconf())
    assert r.code == 0
    assert recorder.names == ["del"]


def test_own_netns_detection_compares_inodes_not_paths():
    assert is_own_netns("/proc/self/ns/net")
    assert is_own_netns("/proc/thread-self/ns/net")
    assert not is_own_netns("/var/run/netns/rc-missing")
    assert not is_own_netns("")


# ----------------------------------------------------------------- CmdArgs


def test_cmd_args_carry_env_stdin_and_parsed_config(run_cni, recorder):
    conf = netconf("1.0.0", deviceID="0000:3b:02.1")
    env = base_env("ADD", CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAME=p1")
    run_cni(env, conf)
    ca = recorder.calls[0][1]
    assert ca.command == "ADD"
    assert ca.container_id == "3f2a8c1d9e00"
    assert ca.netns == "/var/run/netns/rc-does-not-exist"
    assert ca.ifname == "net1"
    assert ca.args == "IgnoreUnknown=1;K8S_POD_NAME=p1"
    assert ca.path == ["/opt/cni/bin", "/usr/lib/cni"]
    assert json.loads(ca.stdin_data) == conf
    assert ca.netconf == conf
    assert ca.cni_version == "1.0.0"
    assert ca.conf.name == "rail1"
    assert ca.cni_args.k8s_pod_name == "p1"
    assert ca.env["CNI_ARGS"] == env["CNI_ARGS"]


def test_gc_receives_the_valid_attachments(run_cni, recorder):
    valid = [
        {"containerID": "c1", "ifname": "net1"},
        {"containerID": "c2", "ifname": "net2"},
    ]
    conf = netconf("1.1.0", **{"cni.dev/valid-attachments": valid})
    r = run_cni(base_env("GC"), conf)
    assert r.code == 0 and r.stdout == ""
    ca = recorder.calls[0][1]
    assert ca.valid_attachments == [Attachment("c1", "net1"), Attachment("c2", "net2")]
    assert ca.is_valid_attachment("c2", "net2")
    assert not ca.is_valid_attachment("c2", "net1")


def test_gc_accepts_the_earlier_spelling_and_null(run_cni, recorder):
    conf = netconf("1.1.0", **{"cni.dev/attachments": None})
    r = run_cni(base_env("GC"), conf)
    assert r.code == 0
    assert recorder.calls[0][1].valid_attachments == []


def test_gc_without_valid_attachments_is_refused_rather_than_deleting_all(
    run_cni, recorder
):
    r = run_cni(base_env("GC"), netconf("1.1.0"))
    assert r.json["code"] == 7
    assert recorder.calls == []


@pytest.mark.parametrize(
    "valid", [{"containerID": "c1"}, [{"containerID": "c1"}], ["c1"], [{"ifname": 3}]]
)
def test_gc_with_malformed_valid_attachments_is_code_7(run_cni, recorder, valid):
    r = run_cni(
        base_env("GC"), netconf("1.1.0", **{"cni.dev/valid-attachments": valid})
    )
    assert r.json["code"] == 7
    assert recorder.calls == []


# ------------------------------------------------------------------ output


@pytest.mark.parametrize("conf_version", ALL)
def test_add_result_is_printed_at_the_config_version(run_cni, recorder, conf_version):
    recorder.add_result = sample_result()
    r = run_cni(base_env("ADD"), netconf(conf_version))
    assert r.code == 0
    out = r.json
    assert out["cniVersion"] == conf_version
    assert out == sample_result().to_json(conf_version)
    old = version.parse(conf_version) <= version.parse("0.4.0")
    assert ("version" in out["ips"][0]) is old
    assert ("table" in out["routes"][0]) is (conf_version == "1.1.0")


def test_result_is_indented_like_go_print_result(run_cni, recorder):
    recorder.add_result = sample_result()
    r = run_cni(base_env("ADD"), netconf("1.0.0"))
    assert r.stdout.startswith('{\n    "cniVersion": "1.0.0",\n')
    assert r.stdout.endswith("}\n")


@pytest.mark.parametrize("conf_version", ALL)
def test_add_returning_none_passes_prev_result_through(run_cni, conf_version):
    prev = sample_result().to_json("0.4.0" if conf_version < "1.0.0" else "1.0.0")
    conf = netconf(conf_version, prevResult=prev)
    r = run_cni(base_env("ADD"), conf)
    assert r.code == 0
    assert r.json["cniVersion"] == conf_version
    assert r.json["ips"][0]["address"] == "172.16.11.5/24"
    assert r.json["interfaces"][0]["name"] == "net1"


def test_add_returning_none_without_prev_result_prints_an_empty_result(run_cni):
    r = run_cni(base_env("ADD"), netconf("1.0.0"))
    assert r.json == {"cniVersion": "1.0.0", "dns": {}}


@pytest.mark.parametrize("command", ["DEL", "STATUS", "GC"])
def test_commands_without_result_print_nothing(run_cni, command):
    conf = netconf("1.1.0", **{"cni.dev/valid-attachments": []})
    r = run_cni(base_env(command), conf)
    assert (r.code, r.stdout) == (0, "")


def test_missing_optional_funcs_succeed_as_no_ops(run_cni):
    funcs = PluginFuncs(add=lambda ca: None, del_=lambda ca: None)
    for command in ("CHECK", "STATUS", "GC"):
        conf = netconf("1.1.0", **{"cni.dev/valid-attachments": []})
        r = run_cni(base_env(command), conf, funcs=funcs)
        assert (r.code, r.stdout) == (0, ""), command


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("conf_version", ALL)
def test_cni_error_becomes_spec_error_json_on_stdout(run_cni, recorder, conf_version):
    recorder.raise_exc = CniError(100, "VF busy", "0000:3b:02.1 held by netns x")
    r = run_cni(base_env("ADD"), netconf(conf_version))
    assert r.code == 1
    assert r.json == {
        "cniVersion": conf_version,
        "code": 100,
        "msg": "VF busy",
        "details": "0000:3b:02.1 held by netns x",
    }
    assert "VF busy" in r.stderr


def test_error_without_details_omits_the_key(run_cni, recorder):
    recorder.raise_exc = CniError(7, "bad config")
    r = run_cni(base_env("DEL"), netconf())
    assert r.json == {"cniVersion": "1.0.0", "code": 7, "msg": "bad config"}


def test_ipam_error_keeps_its_code(run_cni, recorder):
    recorder.raise_exc = IpamError(50, "ipamd unreachable", "connect: no such file")
    r = run_cni(base_env("STATUS"), netconf("1.1.0"))
    assert r.json["code"] == 50
    assert r.json["msg"] == "ipamd unreachable"
    assert r.json["details"] == "connect: no such file"


def test_unexpected_exception_is_code_999_with_one_line_on_stderr(run_cni, recorder):
    recorder.raise_exc = ZeroDivisionError("division by zero")
    r = run_cni(base_env("ADD"), netconf())
    assert r.code == 1
    assert r.json["code"] == 999
    assert r.json["msg"] == "division by zero"
    assert "Traceback" not in r.stdout
    # A runtime shows stderr next to the error: one line with the cause.
    assert "Traceback" not in r.stderr
    assert "ADD failed unexpectedly: division by zero" in r.stderr


def test_unexpected_exception_traceback_goes_to_the_log_file_once(
    run_cni, recorder, tmp_path
):
    recorder.raise_exc = ZeroDivisionError("division by zero")
    log_file = tmp_path / "plugin.log"
    r = run_cni(base_env("ADD"), netconf(logFile=str(log_file)))
    assert r.json["code"] == 999
    text = log_file.read_text()
    assert text.count("Traceback") == 1
    assert "ZeroDivisionError" in text
    assert "Traceback" not in r.stderr


def test_rollback_failures_are_appended_to_error_details(run_cni):
    def add(ca):
        with Rollback() as rb:
            rb.push(lambda: (_ for _ in ()).throw(OSError("EBUSY")), "restore MAC")
            raise CniError(100, "move failed", "netlink said no")

    r = run_cni(base_env("ADD"), netconf(), funcs=PluginFuncs(add=add, del_=print))
    assert r.json["code"] == 100
    assert r.json["details"] == (
        "netlink said no; rollback incomplete: restore MAC: EBUSY"
    )


def test_stdout_holds_exactly_one_json_document_on_error(run_cni, recorder):
    recorder.raise_exc = CniError(100, "x")
    r = run_cni(base_env("ADD"), netconf())
    json.loads(r.stdout)  # raises if there were two documents


# ----------------------------------------------------------------- logging


def test_log_file_and_level_from_the_config_are_honoured(run_cni, tmp_path: Path):
    log_file = tmp_path / "sriov.log"
    conf = netconf(logLevel="debug", logFile=str(log_file))
    r = run_cni(base_env("ADD"), conf, plugin_name="sriov")
    assert r.code == 0
    text = log_file.read_text()
    assert "[sriov ADD cid=3f2a8c1d9e00 if=net1]" in text
    assert "DEBUG" in text
    assert r.stderr == ""


def test_errors_are_logged_to_stderr_by_default(run_cni, recorder):
    recorder.raise_exc = CniError(100, "VF busy")
    r = run_cni(base_env("ADD"), netconf())
    assert "ERROR" in r.stderr and "VF busy" in r.stderr
    assert "cid=3f2a8c1d9e00" in r.stderr


def test_default_level_hides_debug_lines(run_cni):
    r = run_cni(base_env("ADD"), netconf())
    assert "DEBUG" not in r.stderr


def test_recorder_sees_one_call_per_command(recorder: Recorder, run_cni):
    run_cni(base_env("ADD"), netconf())
    run_cni(base_env("DEL"), netconf())
    assert recorder.names == ["add", "del"]


# ------------------------------------------------------- as a real process


# ------------------------------------------- commands handed over as a factory


class Factory:
    """A PluginFuncs factory that counts how often skel asked for the commands."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.calls = 0

    def __call__(self) -> PluginFuncs:
        self.calls += 1
        return self.recorder.funcs()


def test_version_never_loads_the_commands(recorder: Recorder, run_cni):
    factory = Factory(recorder)
    r = run_cni(base_env("VERSION"), b"", funcs=factory)
    assert r.code == 0 and json.loads(r.stdout)["supportedVersions"]
    assert factory.calls == 0


@pytest.mark.parametrize(
    ("stdin", "code"),
    [
        pytest.param(b"{not json", 6, id="undecodable"),
        pytest.param(b'{"cniVersion": "1.0.0", "type": "x"}', 7, id="no-name"),
        pytest.param(b'{"cniVersion": "9.9.9", "name": "r"}', 1, id="bad-version"),
    ],
)
def test_generic_config_errors_never_load_the_commands(
    recorder: Recorder, run_cni, stdin, code
):
    factory = Factory(recorder)
    r = run_cni(base_env("ADD"), stdin, funcs=factory)
    assert (r.code, r.json["code"]) == (1, code)
    assert factory.calls == 0


def test_commands_load_once_when_a_command_runs(recorder: Recorder, run_cni):
    factory = Factory(recorder)
    r = run_cni(base_env("ADD"), netconf(), funcs=factory)
    assert r.code == 0
    assert factory.calls == 1
    assert recorder.names == ["add"]


def test_a_factory_that_fails_is_an_internal_error(run_cni):
    def broken() -> PluginFuncs:
        raise ImportError("no module named cni.plugins.gone")

    r = run_cni(base_env("DEL"), netconf(), funcs=broken)
    assert (r.code, r.json["code"]) == (1, 999)
    assert "cni.plugins.gone" in r.json["msg"]
