# SPDX-License-Identifier: Apache-2.0
"""The ``ipamd`` admin CLI (click CliRunner) against a real daemon."""

from __future__ import annotations

from click.testing import CliRunner

from ipamd.cli import main


def test_admin_command_without_daemon_fails_clearly(short_dir) -> None:
    res = CliRunner().invoke(
        main, ["status", "--socket", str(short_dir / "none.sock"), "--timeout", "0.05"]
    )
    assert res.exit_code == 1
    assert "UNAVAILABLE" in res.output
    # One line that says where it looked and how to point it elsewhere.
    assert res.output.count("\n") == 1 and "Traceback" not in res.output
    assert f"ipamd is not reachable at {short_dir / 'none.sock'}" in res.output
    assert "--socket PATH or RAILYARD_IPAMD_SOCKET=PATH" in res.output


def test_admin_command_names_every_endpoint_it_tried(short_dir) -> None:
    a, b = short_dir / "a.sock", short_dir / "b.sock"
    res = CliRunner().invoke(
        main, ["pool", "list", "--socket", f"{a},{b}", "--timeout", "0.1"]
    )
    assert res.exit_code == 1
    assert f"not reachable at {a}, {b} (UNAVAILABLE" in res.output
