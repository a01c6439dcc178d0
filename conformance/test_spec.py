# SPDX-License-Identifier: Apache-2.0
"""CNI spec cases, judged on every subject where they apply.

Each test states one rule of the spec (SPEC.md 1.1, CONVENTIONS.md, libcni's
skel behaviour where the spec defers to it) and runs the binary as a runtime
would. Where a Go reference plugin breaks a rule, the break is recorded in
deviations.json with an explanation and the test becomes a strict xfail.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from conformance import netns
from conformance.results import (
    validate_error,
    validate_result,
    validate_version_info,
)
from conformance.runner import PluginError, Runner, RuntimeConf, at_least, gc_attachment
from conformance.subjects import KNOWN_VERSIONS, Attachment, Subject

pytestmark = pytest.mark.integration

Deviation = Callable[[str], None]

# Spec codes (SPEC.md "Well-known Error Codes").
INCOMPATIBLE_VERSION, INVALID_ENV, DECODE_FAILURE, INVALID_CONFIG = 1, 4, 6, 7
STATUS_UNAVAILABLE = 50


def expect_error(att: Attachment, env: dict[str, str], stdin: object) -> dict:
    """Run the plugin under test; it must fail with an error JSON on stdout."""
    ex = att.runner.execute(att.plugin_type, env, stdin)
    assert ex.returncode != 0, (
        f"expected an error, got exit 0; stdout={ex.stdout!r} "
        f"stderr={ex.stderr[-300:]!r}"
    )
    try:
        error = ex.json()
    except ValueError:
        pytest.fail(f"stdout is not one JSON document: {ex.stdout!r}")
    assert isinstance(error, dict), error
    return error


def add_result(att: Attachment) -> object:
    return att.runner.add_list(att.conflist, att.rt)


def require_attaches(subject: Subject) -> None:
    if not subject.attaches:
        pytest.skip(f"not applicable: {subject.name} puts no interface into the netns")


# ------------------------------------------------------------------ VERSION


def test_version_reports_supported_versions(subject: Subject) -> None:
    info = subject.runner().version(subject.plugin_type)
    assert validate_version_info(info) == []
    assert set(info["supportedVersions"]) & set(KNOWN_VERSIONS)


def test_version_ignores_stdin_and_other_env(subject: Subject) -> None:
    runner = subject.runner()
    ex = runner.execute(subject.plugin_type, {"CNI_COMMAND": "VERSION"}, b"{not json")
    assert ex.returncode == 0, ex.stdout
    assert ex.json() == runner.version(subject.plugin_type)


@pytest.mark.parametrize("version", KNOWN_VERSIONS)
def test_add_negotiates_each_spec_version(subject: Subject, version: str) -> None:
    """A supported cniVersion gets a result of exactly that version's shape;
    an unsupported one is refused with code 1."""
    with subject.attachment(version) as att:
        if not subject.supports(version):
            error = expect_error(att, att.env("ADD"), att.plugin_conf())
            assert error["code"] == INCOMPATIBLE_VERSION, error
            return
        result = add_result(att)
        assert validate_result(result, version) == []
        if subject.attaches and at_least(version, "0.3.0"):
            mine = [i for i in result["interfaces"] if i.get("name") == att.rt.ifname]
            assert mine, f"no interface {att.rt.ifname} in {result['interfaces']}"
            assert mine[0].get("sandbox") == att.rt.netns, mine
        # DEL with this version's prevResult; release is judged by the DEL cases.
        att.runner.del_list(att.conflist, att.rt)


def test_add_result_names_the_interface_it_created(subject: Subject) -> None:
    require_attaches(subject)
    with subject.attachment() as att:
        result = add_result(att)
        mine = [i for i in result["interfaces"] if i.get("name") == att.rt.ifname]
        assert mine and mine[0].get("sandbox") == att.rt.netns, result
        in_pod = netns.links(att.netns_name)
        assert att.rt.ifname in in_pod, sorted(in_pod)
        if "mac" in mine[0]:
            assert mine[0]["mac"].lower() == in_pod[att.rt.ifname]["address"].lower()


# -------------------------------------------------------------- environment

ADD_REQUIRED = ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH")
DEL_REQUIRED = ("CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH")


@pytest.mark.parametrize("variable", ADD_REQUIRED)
def test_add_without_required_env_is_error_4(subject: Subject, variable: str) -> None:
    with subject.attachment() as att:
        env = att.env("ADD")
        del env[variable]
        error = expect_error(att, env, att.plugin_conf())
        assert error["code"] == INVALID_ENV, error
        assert variable in error["msg"] + error.get("details", ""), error


@pytest.mark.parametrize("variable", DEL_REQUIRED)
def test_del_without_required_env_is_error_4(subject: Subject, variable: str) -> None:
    with subject.attachment() as att:
        env = att.env("DEL")
        del env[variable]
        error = expect_error(att, env, att.plugin_conf())
        assert error["code"] == INVALID_ENV, error
        assert variable in error["msg"] + error.get("details", ""), error


def test_without_cni_command_nothing_is_done(subject: Subject) -> None:
    """CNI_COMMAND is required. The spec's answer is error 4; libcni's skel
    instead prints an 'about' text on stderr and exits 0 (its documented
    convention for humans running a plugin by hand). Both are accepted; what
    is not is printing a result or acting on the config."""
    with subject.attachment() as att:
        env = att.env("ADD")
        del env["CNI_COMMAND"]
        ex = att.runner.execute(att.plugin_type, env, att.plugin_conf())
        if ex.returncode != 0:
            assert json.loads(ex.stdout)["code"] == INVALID_ENV, ex.stdout
        else:
            assert ex.stdout.strip() == b"", f"printed on stdout: {ex.stdout!r}"
            assert ex.stderr.strip(), "exit 0 with no about text on stderr"
        if subject.attaches:
            assert att.rt.ifname not in netns.links(att.netns_name)


def test_unknown_cni_command_is_error_4(subject: Subject) -> None:
    with subject.attachment() as att:
        error = expect_error(att, att.env("FROB"), att.plugin_conf())
        assert error["code"] == INVALID_ENV, error


def test_container_id_with_invalid_characters_is_error_4(subject: Subject) -> None:
    with subject.attachment() as att:
        error = expect_error(
            att, att.env("ADD", CNI_CONTAINERID="bad/id"), att.plugin_conf()
        )
        assert error["code"] == INVALID_ENV, error


# -------------------------------------------------------------------- config


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
def test_unparsable_config_is_error_6(subject: Subject, command: str) -> None:
    with subject.attachment() as att:
        error = expect_error(att, att.env(command), b'{"cniVersion": "1.0.0", "name": ')
        assert error["code"] == DECODE_FAILURE, error


def test_config_without_name_is_error_7(subject: Subject) -> None:
    with subject.attachment() as att:
        conf = att.plugin_conf()
        del conf["name"]
        error = expect_error(att, att.env("ADD"), conf)
        assert error["code"] == INVALID_CONFIG, error


@pytest.mark.parametrize("command", ["ADD", "DEL"])
def test_unsupported_cni_version_is_error_1(subject: Subject, command: str) -> None:
    with subject.attachment() as att:
        conf = att.plugin_conf()
        conf["cniVersion"] = "9.9.9"
        error = expect_error(att, att.env(command), conf)
        assert error["code"] == INCOMPATIBLE_VERSION, error


@pytest.mark.parametrize("old", ["0.3.1", "0.2.0"])
def test_check_on_config_older_than_0_4_0_is_error_1(
    subject: Subject, old: str
) -> None:
    with subject.attachment() as att:
        conf = att.plugin_conf()
        conf["cniVersion"] = old
        error = expect_error(att, att.env("CHECK"), conf)
        assert error["code"] == INCOMPATIBLE_VERSION, error


# ------------------------------------------------------------ error document

ERROR_TRIGGERS = {
    "missing-env": lambda att: (
        {k: v for k, v in att.env("ADD").items() if k != "CNI_IFNAME"},
        att.plugin_conf(),
    ),
    "bad-json": lambda att: (att.env("ADD"), b"{"),
    "bad-version": lambda att: (
        att.env("ADD"),
        {**att.plugin_conf(), "cniVersion": "9.9.9"},
    ),
    "check-too-old": lambda att: (
        att.env("CHECK"),
        {**att.plugin_conf(), "cniVersion": "0.3.1"},
    ),
}


@pytest.mark.parametrize("trigger", sorted(ERROR_TRIGGERS))
def test_error_document_has_spec_shape(
    subject: Subject, deviation: Deviation, trigger: str
) -> None:
    """``{cniVersion, code, msg[, details]}`` on stdout, non-zero exit, nothing else."""
    deviation("error-shape")
    with subject.attachment() as att:
        env, stdin = ERROR_TRIGGERS[trigger](att)
        ex = att.runner.execute(att.plugin_type, env, stdin)
        assert ex.returncode != 0
        error = json.loads(ex.stdout)  # exactly one document: json.loads rejects extra
        assert validate_error(error, expect_version=None) == []


# ----------------------------------------------------------- CHECK and DEL


def test_check_after_add_succeeds_with_cached_prev_result(subject: Subject) -> None:
    with subject.attachment() as att:
        if not at_least(att.version, "0.4.0"):
            pytest.skip("not applicable: CHECK needs 0.4.0")
        add_result(att)
        att.runner.check_list(att.conflist, att.rt)


def test_del_three_times_succeeds(subject: Subject, deviation: Deviation) -> None:
    """DEL is idempotent: a runtime retries it, and after the first success
    libcni has dropped its cached result, so the retries come without one."""
    deviation("del-idempotent")
    with subject.attachment() as att:
        add_result(att)
        for attempt in range(1, 4):
            first = len(att.runner.history)
            att.runner.del_list(att.conflist, att.rt)
            for ex in att.runner.history[first:]:
                assert ex.stdout.strip() == b"", f"DEL #{attempt} printed {ex.stdout!r}"
        subject.assert_released(att)


def test_del_without_add_succeeds(subject: Subject, deviation: Deviation) -> None:
    deviation("del-without-add")
    with subject.attachment() as att:
        att.runner.del_list(att.conflist, att.rt)


def test_del_after_netns_is_gone_succeeds(
    subject: Subject, deviation: Deviation
) -> None:
    deviation("del-netns-gone")
    with subject.attachment() as att:
        add_result(att)
        att.vanish_netns()
        att.runner.del_list(att.conflist, att.rt)  # CNI_NETNS names a dead path
        subject.assert_released(att)


def test_del_with_empty_netns_succeeds(subject: Subject) -> None:
    """containerd sends DEL with CNI_NETNS="" once the sandbox is gone."""
    with subject.attachment() as att:
        add_result(att)
        att.vanish_netns()
        gone = RuntimeConf(att.rt.container_id, att.rt.ifname, "", att.rt.args)
        att.runner.del_list(att.conflist, gone)
        subject.assert_released(att)


def test_add_fails_when_ifname_already_exists_in_netns(
    subject: Subject, deviation: Deviation
) -> None:
    require_attaches(subject)
    deviation("add-existing-ifname")
    with subject.attachment() as att:
        netns.ip(
            "link",
            "add",
            att.rt.ifname,
            "type",
            "veth",
            "peer",
            "name",
            netns.unique("x"),
            netns=att.netns_name,
        )
        with pytest.raises(PluginError) as failed:
            add_result(att)
        assert failed.value.error is not None, str(failed.value)
        # Nothing may be left half-attached: the occupant is untouched and a
        # DEL (the runtime's cleanup after a failed ADD) succeeds.
        assert att.rt.ifname in netns.links(att.netns_name)
        att.runner.del_list(att.conflist, att.rt)


# ------------------------------------------------------------ 1.1.0 GC/STATUS


def require_1_1(subject: Subject) -> None:
    if not subject.supports("1.1.0"):
        pytest.skip(f"not applicable: {subject.name} does not support 1.1.0")


def test_status_of_a_ready_plugin_succeeds(subject: Subject) -> None:
    require_1_1(subject)
    with subject.attachment("1.1.0") as att:
        ex = att.runner.execute(
            att.plugin_type, att.runner.cni_env("STATUS", None), att.plugin_conf()
        )
        assert ex.returncode == 0, ex.stdout
        assert ex.stdout.strip() == b""


def test_status_is_error_50_when_the_ipam_backend_is_down(subject: Subject) -> None:
    require_1_1(subject)
    with subject.attachment("1.1.0") as att:
        conf = subject.without_backend(att.plugin_conf())
        if conf is None:
            pytest.skip(f"not applicable: {subject.name} has no backend to take away")
        error = expect_error(att, att.runner.cni_env("STATUS", None), conf)
        assert error["code"] == STATUS_UNAVAILABLE, error


def test_status_and_gc_need_1_1_0(subject: Subject) -> None:
    require_1_1(subject)
    with subject.attachment("1.0.0") as att:
        for command in ("STATUS", "GC"):
            error = expect_error(
                att, att.runner.cni_env(command, None), att.plugin_conf()
            )
            assert error["code"] == INCOMPATIBLE_VERSION, (command, error)


def test_gc_keeps_valid_attachments_and_releases_the_rest(subject: Subject) -> None:
    require_1_1(subject)
    with subject.attachment("1.1.0") as keep, subject.attachment("1.1.0") as stale:
        add_result(keep)
        add_result(stale)
        # The runtime forgot `stale` (no DEL ever came, no cache entry either):
        # only the plugins' GC can reclaim it, so run GC from an empty cache.
        forgetful = Runner(
            keep.runner.cni_path,
            keep.runner.cache_dir / "empty",
            exec_prefix=keep.runner.exec_prefix,
            extra_env=keep.runner.extra_env,
        )
        valid = [gc_attachment(keep.rt.container_id, keep.rt.ifname)]
        assert forgetful.gc_list(keep.conflist, valid) == []
        assert [ex.env["CNI_COMMAND"] for ex in forgetful.history] == ["GC"] * len(
            keep.conflist["plugins"]
        )
        keep.runner.check_list(keep.conflist, keep.rt)
        subject.assert_gc_released(stale)
