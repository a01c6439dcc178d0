# SPDX-License-Identifier: Apache-2.0
"""What the agent's spare workers prepare: the ipamd channel a plugin will use.

The endpoints follow the plugins' own resolution (``--ipamd``, else
$RAILYARD_IPAMD_SOCKET, else the default socket); a TLS file that cannot be
read turns the preparation off once, at start, instead of failing in every
spare.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cni.agent.warmup import ipamd_channels
from ipamd import client as transport
from tests.doubles.ipamd_channels import no_channels_left  # noqa: F401


def opened(prepare: object) -> list[str]:
    """The endpoints ``prepare`` opened channels to (nobody serves them here)."""
    assert callable(prepare)
    prepare()
    return [key[0] for key in transport._OPENED_AHEAD]


def test_the_spare_opens_what_a_plugin_without_ipam_socket_dials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("cni.agent.warmup.CONNECT_WAIT", 0)
    sock = tmp_path / "ipamd.sock"
    assert opened(ipamd_channels({"RAILYARD_IPAMD_SOCKET": str(sock)})) == [
        f"unix://{sock}"
    ]


def test_named_endpoints_win_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("cni.agent.warmup.CONNECT_WAIT", 0)
    env = {"RAILYARD_IPAMD_SOCKET": str(tmp_path / "env.sock")}
    replicas = [str(tmp_path / "a.sock"), str(tmp_path / "b.sock")]
    assert opened(ipamd_channels(env, replicas)) == [f"unix://{r}" for r in replicas]


def test_an_unreadable_tls_file_turns_the_preparation_off_once(
    caplog: pytest.LogCaptureFixture,
):
    env = {"RAILYARD_IPAMD_TLS_CA": "/nonexistent/ca.pem"}
    assert ipamd_channels(env, ["ipamd.example:9440"]) is None
    assert "cannot read TLS file(s) /nonexistent/ca.pem" in caplog.text


def test_an_endpoint_that_is_not_a_socket_is_refused_at_start(tmp_path: Path):
    regular = tmp_path / "ipamd.sock"
    regular.write_text("")
    with pytest.raises(ValueError, match="is not a socket"):
        ipamd_channels({}, [str(regular)])
