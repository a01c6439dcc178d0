# SPDX-License-Identifier: Apache-2.0
"""Issue 10's rows at the skel boundary, in-process and without root.

Each hostile input is refused with one CNI error document before the plugin's
command runs (the recorder proves nothing was called); an ADD whose result
cannot be delivered is taken back by a DEL; the deadline's remaining time is
what the IPAM clients bound their calls by.
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest

from cni import deadline
from cni.skel import MAX_CONTAINER_ID, PluginFuncs, run_plugin
from cni.types import Result
from tests.unit.cni.core.conftest import base_env, netconf


@pytest.mark.parametrize(
    ("ifname", "msg"),
    [
        ("%d", "interface name contains %"),
        ("net%d", "interface name contains %"),
        ("n\x01", "interface name contains unprintable characters"),
        ("a" * 16, "interface name is too long"),
        ("..", "interface name is . or .."),
        ("a b", "whitespace"),
    ],
)
def test_an_ifname_the_kernel_would_rewrite_is_refused(
    run_cni, recorder, ifname, msg
) -> None:
    r = run_cni(base_env("ADD", CNI_IFNAME=ifname), netconf())
    assert r.code == 1
    assert r.json["code"] == 4
    assert msg in r.json["msg"]
    assert recorder.names == []


def test_a_container_id_longer_than_a_record_name_allows_is_refused(
    run_cni, recorder
) -> None:
    ok = run_cni(base_env("ADD", CNI_CONTAINERID="c" * MAX_CONTAINER_ID), netconf())
    assert ok.code == 0
    r = run_cni(
        base_env("ADD", CNI_CONTAINERID="c" * (MAX_CONTAINER_ID + 1)), netconf()
    )
    assert r.json["code"] == 4
    assert r.json["msg"] == "containerID is too long"
    assert recorder.names == ["add"]


@pytest.mark.parametrize(
    "name", ["CNI_NETNS", "CNI_IFNAME", "CNI_CONTAINERID", "CNI_ARGS", "CNI_PATH"]
)
def test_non_utf8_env_is_code_4_not_a_crash(run_cni, recorder, name) -> None:
    # os.environ hands undecodable bytes over as lone surrogates.
    bad = os.fsdecode(b"/var/run/netns/\xff\xfe")
    r = run_cni(base_env("ADD", **{name: bad}), netconf())
    assert r.code == 1
    assert r.json["code"] == 4
    assert r.json["msg"] == f"{name} is not valid UTF-8"
    assert "Traceback" not in r.stderr
    assert recorder.names == []


def test_a_fifo_as_netns_is_refused_without_blocking(
    run_cni, recorder, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    r = run_cni(base_env("ADD", CNI_NETNS=str(fifo)), netconf(), deadline_seconds=5)
    assert time.monotonic() - start < 2
    assert r.json["code"] == 4
    assert r.json["msg"] == "CNI_NETNS is not a network namespace"
    assert recorder.names == []


def test_a_regular_file_as_netns_is_refused(run_cni, recorder, tmp_path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    r = run_cni(base_env("CHECK", CNI_NETNS=str(plain)), netconf())
    assert r.json["code"] == 4
    assert recorder.names == []


def test_a_long_network_name_is_refused_with_a_short_message(run_cni) -> None:
    r = run_cni(base_env("ADD"), netconf(name="n" * (10 * 1024 * 1024)))
    assert r.json["code"] == 7
    assert r.json["msg"] == "network name is too long"
    assert len(r.stdout) < 1000


def test_a_network_name_with_a_trailing_newline_is_refused(run_cni) -> None:
    r = run_cni(base_env("ADD"), netconf(name="rail1\n"))
    assert r.json["code"] == 7


class _Broken(io.StringIO):
    """A stdout that cannot take the answer (a full disk, a closed pipe)."""

    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc

    def flush(self) -> None:
        raise self.exc


@pytest.mark.parametrize("exc", [OSError(28, "No space left"), BrokenPipeError()])
def test_an_add_whose_result_cannot_be_written_is_deleted(recorder, exc) -> None:
    recorder.add_result = Result(cni_version="1.0.0")
    err = io.StringIO()
    code = run_plugin(
        recorder.funcs(),
        "t",
        env=base_env("ADD"),
        stdin=io.BytesIO(json.dumps(netconf()).encode()),
        stdout=_Broken(exc),
        stderr=err,
    )
    assert code == 1
    assert recorder.names == ["add", "del"]
    assert "rolling back" in err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_an_add_whose_result_cannot_be_built_is_deleted(recorder) -> None:
    calls: list[str] = []

    class Unprintable(Result):
        def to_json(self, cni_version: str):  # type: ignore[no-untyped-def]
            raise ValueError("cannot convert")

    funcs = PluginFuncs(
        add=lambda ca: calls.append("add") or Unprintable(cni_version="1.0.0"),
        del_=lambda ca: calls.append("del"),
    )
    out, err = io.StringIO(), io.StringIO()
    code = run_plugin(
        funcs,
        "t",
        env=base_env("ADD"),
        stdin=io.BytesIO(json.dumps(netconf()).encode()),
        stdout=out,
        stderr=err,
    )
    assert code == 1
    assert json.loads(out.getvalue())["code"] == 999
    assert calls == ["add", "del"]


def test_a_failed_del_does_not_retry_itself(recorder) -> None:
    """Only a finished ADD is taken back; a DEL's error is just reported."""
    out = _Broken(OSError(28, "No space left"))
    err = io.StringIO()
    code = run_plugin(
        recorder.funcs(),
        "t",
        env=base_env("DEL"),
        stdin=io.BytesIO(json.dumps(netconf()).encode()),
        stdout=out,
        stderr=err,
    )
    assert code == 0  # DEL prints nothing, so nothing failed to print
    assert recorder.names == ["del"]


def test_log_file_that_is_a_device_falls_back_to_stderr(run_cni, recorder) -> None:
    recorder.add_result = Result(cni_version="1.0.0")
    r = run_cni(base_env("ADD"), netconf(logFile="/dev/full", logLevel="debug"))
    assert r.code == 0
    json.loads(r.stdout)  # exactly one document
    assert "cannot open logFile '/dev/full' (not a regular file)" in r.stderr


def test_remaining_counts_down_and_keeps_a_reserve() -> None:
    assert deadline.remaining() is None
    out = deadline.OutputOnce(io.StringIO())
    with deadline.Deadline(8.0, "ADD", out, lambda e: "", grace=1.0):
        left = deadline.remaining()
        assert left is not None
        # 25% of 8 s is kept for the rollback.
        assert 5.5 < left <= 6.0
    assert deadline.remaining() is None
    with deadline.Deadline(100.0, "ADD", out, lambda e: "", grace=1.0):
        left = deadline.remaining()
        assert left is not None and 94.5 < left <= 95.0  # the reserve stops at 5 s


def test_a_relative_log_file_is_not_created_in_the_working_directory(
    run_cni, recorder, tmp_path, monkeypatch
) -> None:
    """Found by the plugin fuzz: logFile "off" or "1.1.0" created files
    wherever the plugin ran."""
    monkeypatch.chdir(tmp_path)
    recorder.add_result = Result(cni_version="1.0.0")
    r = run_cni(base_env("ADD"), netconf(logFile="plugin.log"))
    assert r.code == 0
    assert list(tmp_path.iterdir()) == []
    assert "cannot open logFile 'plugin.log' (not an absolute path)" in r.stderr
