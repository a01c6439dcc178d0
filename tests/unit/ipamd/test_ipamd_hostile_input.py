# SPDX-License-Identifier: Apache-2.0
"""What a careless operator feeds ``ipamd pool apply``, row by row.

Each case runs the real CLI (click CliRunner) against an in-process ipamd, or
sends the request straight over gRPC; the CLI answers in one line without a
traceback, and the daemon logs no traceback for any of it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from ipamd.cli import main
from ipamd.manifest import MAX_NESTING


@pytest.fixture(autouse=True)
def no_daemon_traceback(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG - 1)
    yield
    for record in caplog.records:
        if record.levelno >= logging.INFO:  # DEBUG may carry one, for developers
            assert record.exc_info is None, record.getMessage()
            assert "Traceback" not in record.getMessage()


def one_line_error(res: Result) -> str:
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    assert res.output.startswith("Error: ") and res.output.count("\n") == 1
    return res.output


# -- encodings -----------------------------------------------------------


def test_an_unreadable_pool_file_is_one_line(tmp_path) -> None:
    # Reading /proc/self/mem from offset 0 fails (EIO) for root too.
    res = CliRunner().invoke(main, ["pool", "apply", "-f", "/proc/self/mem"])
    assert "/proc/self/mem: Input/output error" in one_line_error(res)


# -- nesting ---------------------------------------------------------------

DEEP = "a: " + "[" * 5000 + "]" * 5000 + "\n"


def test_deep_nesting_is_refused_by_the_cli_before_sending(tmp_path) -> None:
    # No daemon at this socket: the error must come before any connection.
    path = tmp_path / "deep.yaml"
    path.write_text(DEEP)
    res = CliRunner().invoke(
        main, ["pool", "apply", "-f", str(path), "--socket", str(tmp_path / "x")]
    )
    out = one_line_error(res)
    assert f"nests deeper than {MAX_NESTING} levels" in out
    assert "not reachable" not in out


# -- numbers and types -------------------------------------------------------


# -- unicast only, no zones ----------------------------------------------------


# -- big lists -----------------------------------------------------------------
