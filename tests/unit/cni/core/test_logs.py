# SPDX-License-Identifier: Apache-2.0
"""cni.logs: sriov-cni's logLevel/logFile, context on every line, no leaks."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from cni import logs


@pytest.fixture(autouse=True)
def _restore_root():
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    assert root.handlers == handlers
    root.setLevel(level)


def emit_all(name: str = "cni.test") -> None:
    log = logging.getLogger(name)
    log.critical("c-line")
    log.error("e-line")
    log.warning("w-line")
    log.info("i-line")
    log.debug("d-line")
    log.log(logs.VERBOSE, "v-line")


@pytest.mark.parametrize(
    ("level", "shown"),
    [
        ("panic", ["c"]),
        ("error", ["c", "e"]),
        ("warning", ["c", "e", "w"]),
        ("info", ["c", "e", "w", "i"]),
        ("", ["c", "e", "w", "i"]),
        ("debug", ["c", "e", "w", "i", "d"]),
        ("verbose", ["c", "e", "w", "i", "d", "v"]),
        ("DEBUG", ["c", "e", "w", "i", "d"]),
    ],
)
def test_log_level_names_follow_sriov_cni(level, shown):
    buf = io.StringIO()
    with logs.configured(level, stderr=buf):
        emit_all()
    got = [
        x[0]
        for x in ("c-line", "e-line", "w-line", "i-line", "d-line", "v-line")
        if x in buf.getvalue()
    ]
    assert got == shown


def test_unknown_level_falls_back_to_info_with_a_warning():
    buf = io.StringIO()
    with logs.configured("chatty", stderr=buf):
        emit_all()
    text = buf.getvalue()
    assert "unknown logLevel 'chatty'" in text
    assert "i-line" in text and "d-line" not in text


def test_log_file_is_appended_to_and_stderr_stays_quiet(tmp_path: Path):
    path = tmp_path / "sriov.log"
    path.write_text("earlier line\n")
    buf = io.StringIO()
    with logs.configured("info", str(path), stderr=buf):
        logging.getLogger("cni.test").info("new line")
    assert path.read_text().startswith("earlier line\n")
    assert "new line" in path.read_text()
    assert buf.getvalue() == ""


def test_unopenable_log_file_falls_back_to_stderr(tmp_path: Path):
    buf = io.StringIO()
    bad = tmp_path / "missing-dir" / "x.log"
    with logs.configured("info", str(bad), stderr=buf):
        logging.getLogger("cni.test").info("still logged")
    assert "cannot open logFile" in buf.getvalue()
    assert "still logged" in buf.getvalue()


def test_every_line_carries_the_attachment_context():
    buf = io.StringIO()
    ctx = logs.LogContext("sriov", "ADD", "3f2a8c1d9e00aabbccdd", "net1")
    with logs.configured("info", stderr=buf, ctx=ctx) as setup:
        logging.getLogger("cni.plugins.sriov").info("moved VF")
        setup.set_context(pci="0000:3b:02.1")
        logging.getLogger("cni.plugins.sriov").info("set MAC")
    first, second = buf.getvalue().splitlines()
    assert "[sriov ADD cid=3f2a8c1d9e00 if=net1] cni.plugins.sriov: moved VF" in first
    assert "pci=0000:3b:02.1" in second
    assert first.split()[0].endswith("Z")  # UTC timestamps


def test_reconfiguring_replaces_our_handler_and_keeps_foreign_ones():
    foreign = logging.NullHandler()
    root = logging.getLogger()
    root.addHandler(foreign)
    try:
        a, b = io.StringIO(), io.StringIO()
        logs.configure("info", stderr=a)
        setup = logs.configure("info", stderr=b)
        logging.getLogger("cni.test").info("only in b")
        setup.close()
        assert a.getvalue() == "" and "only in b" in b.getvalue()
        assert foreign in root.handlers
    finally:
        root.removeHandler(foreign)


def test_close_restores_the_previous_root_level():
    root = logging.getLogger()
    before = root.level
    with logs.configured("debug", stderr=io.StringIO()):
        assert root.level == logging.DEBUG
    assert root.level == before


def test_module_level_set_context_reaches_the_current_command():
    buf = io.StringIO()
    with logs.configured("info", stderr=buf, ctx=logs.LogContext("rdma", "DEL")):
        logs.set_context(pci="0000:3b:02.1", ifname="net4")
        logging.getLogger("cni.plugins.rdma").info("moved rdma dev")
    assert "[rdma DEL if=net4 pci=0000:3b:02.1]" in buf.getvalue()
