# SPDX-License-Identifier: Apache-2.0
"""The railyard-ipam binary as a runtime execs it, against an ipamd process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cni.ipam.grpc_client import IpamdClient
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION

pytestmark = pytest.mark.integration

# Runs the plugin's entry point, then reports which heavy modules it loaded.
RUNNER = """
import runpy, sys
try:
    runpy.run_module("cni.plugins.ipam", run_name="__main__")
except SystemExit as e:
    code = e.code
heavy = sorted({m.split(".")[0] for m in sys.modules} &
               {"grpc", "sqlalchemy", "click", "yaml", "pyroute2"})
print("heavy-modules:" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


def exec_plugin(command: str, conf: dict, **env: str) -> tuple[int, str, str]:
    environ = {
        **os.environ,
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "ctr1",
        "CNI_NETNS": "/var/run/netns/ra-absent",
        "CNI_IFNAME": "net2",
        "CNI_PATH": "/usr/lib/cni",
        "RAILYARD_NODE_NAME": "node1",
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(conf),
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    last = proc.stderr.strip().splitlines()[-1]
    return proc.returncode, proc.stdout, last.removeprefix("heavy-modules:")


def test_add_del_through_the_binary_loads_grpc_but_never_the_server_stack(
    start_daemon, pools_yaml
) -> None:
    d = start_daemon()
    with IpamdClient(str(d.socket)) as c:
        c.stub.ApplyPools(
            pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=pools_yaml)
        )
    conf = {
        "cniVersion": "1.0.0",
        "name": "rails",
        "type": "host-device",
        "ipam": {"type": "railyard-ipam", "default_ipv4_ippool": ["stress"]},
    }
    code, out, heavy = exec_plugin("ADD", conf, RAILYARD_IPAMD_SOCKET=str(d.socket))
    assert code == 0, out
    assert json.loads(out)["ips"] == [
        {"address": "10.77.0.1/16", "gateway": "10.77.255.254"}
    ]
    assert heavy == "grpc"
    code, out, _ = exec_plugin("DEL", conf, RAILYARD_IPAMD_SOCKET=str(d.socket))
    assert (code, out) == (0, "")
    with IpamdClient(str(d.socket)) as c:
        assert (
            c.stub.Status(pb.StatusRequest(client_version=API_VERSION)).allocations == 0
        )


def test_version_and_config_errors_load_nothing_heavy() -> None:
    code, out, heavy = exec_plugin("VERSION", {})
    assert code == 0 and "1.1.0" in json.loads(out)["supportedVersions"]
    assert heavy == ""
    bad = {
        "cniVersion": "1.0.0",
        "name": "rails",
        "type": "host-device",
        "ipam": {"type": "railyard-ipam", "default_ipv4_ippool": 5},
    }
    code, out, heavy = exec_plugin("ADD", bad)
    assert code == 1 and json.loads(out)["code"] == 7
    assert heavy == ""
