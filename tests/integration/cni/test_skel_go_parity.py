# SPDX-License-Identifier: Apache-2.0
"""Our skel and Go's give a runtime the same error for the same bad input.

Debian's host-local (Go skel of CNI 1.1) is run side by side with a plugin on
``cni.skel`` for inputs that fail in the skeleton, before any plugin code. The
error ``code``, ``msg`` and ``details`` must match (Go's error JSON has no
``cniVersion``; decode errors quote each language's own parser message, so
only their prefix is compared).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GO_PLUGIN = Path("/usr/lib/cni/host-local")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not GO_PLUGIN.exists(), reason="containernetworking-plugins not installed"
    ),
]

OURS = """
from cni.skel import PluginFuncs, main
main(PluginFuncs(lambda ca: None, lambda ca: None), "parity",
     supported_versions=("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"))
"""
# host-local's supported list, so version errors can be compared too; the
# plugin functions are never reached in these cases.

GOOD_ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "3f2a8c1d9e00",
    "CNI_NETNS": "/var/run/netns/rc-parity-missing",
    "CNI_IFNAME": "net1",
    "CNI_PATH": "/usr/lib/cni",
}
GOOD_CONF = {"cniVersion": "1.0.0", "name": "rail1", "type": "host-local"}


def run_both(env: dict[str, str], stdin: bytes) -> tuple[dict[str, Any], ...]:
    outs = []
    for argv in ([str(GO_PLUGIN)], [sys.executable, "-c", OURS]):
        proc = subprocess.run(
            argv,
            input=stdin,
            env=env | {"PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=30,
        )
        assert proc.returncode == 1, proc
        outs.append(json.loads(proc.stdout))
    go, ours = outs
    ours.pop("cniVersion")
    return go, ours


def case(env_changes: dict[str, str | None], conf: Any = GOOD_CONF, id: str = ""):
    return pytest.param(env_changes, conf, id=id)


@pytest.mark.parametrize(
    ("env_changes", "conf"),
    [
        case({"CNI_CONTAINERID": None}, id="add-no-containerid"),
        case({"CNI_NETNS": None}, id="add-no-netns"),
        case({"CNI_IFNAME": None}, id="add-no-ifname"),
        case({"CNI_PATH": None}, id="add-no-path"),
        case({"CNI_COMMAND": "DEL", "CNI_IFNAME": None}, id="del-no-ifname"),
        case({"CNI_COMMAND": "CHECK", "CNI_PATH": None}, id="check-no-path"),
        case({"CNI_CONTAINERID": "-bad"}, id="containerid-chars"),
        case({"CNI_CONTAINERID": "a b"}, id="containerid-space"),
        case({"CNI_IFNAME": "a" * 16}, id="ifname-long"),
        case({"CNI_IFNAME": ".."}, id="ifname-dotdot"),
        case({"CNI_IFNAME": "a:b"}, id="ifname-colon"),
        case({"CNI_IFNAME": "a b"}, id="ifname-space"),
        case({"CNI_COMMAND": "FROB"}, id="unknown-command"),
        case({}, {"cniVersion": "1.0.0"}, id="no-name"),
        case({}, {"cniVersion": "1.0.0", "name": "a b"}, id="name-chars"),
        case({}, {"cniVersion": "9.9.9", "name": "n"}, id="incompatible"),
        case({}, {"cniVersion": "1.1.0", "name": "n"}, id="too-new"),
        case(
            {"CNI_COMMAND": "CHECK"},
            {"cniVersion": "0.3.1", "name": "n"},
            id="check-0.3.1",
        ),
        case({"CNI_COMMAND": "CHECK"}, {"name": "n"}, id="check-no-version"),
    ],
)
def test_skeleton_errors_match_go(env_changes, conf):
    env = dict(GOOD_ENV)
    for key, val in env_changes.items():
        if val is None:
            del env[key]
        else:
            env[key] = val
    go, ours = run_both(env, json.dumps(conf).encode())
    assert ours == go


@pytest.mark.parametrize("stdin", [b"{not json", b"[1]", b'{"name": 3}'])
def test_decode_errors_match_go_up_to_the_parser_message(stdin):
    go, ours = run_both(dict(GOOD_ENV), stdin)
    assert ours["code"] == go["code"] == 6
    prefix = "error unmarshall network config: "
    assert go["msg"].startswith(prefix) and ours["msg"].startswith(prefix)
