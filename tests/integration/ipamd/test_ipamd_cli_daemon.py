# SPDX-License-Identifier: Apache-2.0
"""The ``ipamd`` admin CLI (click CliRunner) against a real daemon: the tests that
run the admin CLI against an ipamd serving on a unix socket.

The rest of them, in-process, are in tests/unit/ipamd/test_ipamd_cli.py (the unit tier).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cni.ipam import IpamRequest
from cni.ipam.grpc_client import IpamdClient
from ipamd.cli import main

pytestmark = pytest.mark.integration


@pytest.fixture
def run(socket_path: str):
    runner = CliRunner()

    def invoke(*args: str, stdin: str | None = None) -> Result:
        return runner.invoke(
            main, list(args), input=stdin, env={"RAILYARD_IPAMD_SOCKET": socket_path}
        )

    return invoke


@pytest.fixture
def applied(run, rails_yaml: str, tmp_path: Path) -> Path:
    path = tmp_path / "pools.yaml"
    path.write_text(rails_yaml)
    res = run("pool", "apply", "-f", str(path))
    assert res.exit_code == 0, res.output
    return path


def allocate(socket_path: str, cid: str, pool: str = "gpu1-net11") -> None:
    with IpamdClient(socket_path) as c:
        c.allocate(
            IpamRequest(
                network="rail1",
                container_id=cid,
                ifname="net1",
                pod_namespace="ns",
                pod_name=cid,
                ipv4_pools=(pool,),
            )
        )


def test_apply_reports_created_then_unchanged(run, applied: Path) -> None:
    res = run("pool", "apply", "-f", str(applied))
    assert res.exit_code == 0
    assert "SpiderIPPool/gpu1-net11 unchanged" in res.output
    res = run("pool", "apply", "-f", "-", "--json", stdin=applied.read_text())
    assert json.loads(res.output)["unchanged"] == [
        "SpiderIPPool/gpu1-net11",
        "SpiderIPPool/gpu1-v6",
        "SpiderIPPool/tiny",
    ]


def test_apply_of_bad_yaml_exits_nonzero_with_the_reason(run, tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: spiderpool.spidernet.io/v2beta1\nkind: [\n")
    res = run("pool", "apply", "-f", str(path))
    assert res.exit_code != 0
    assert "INVALID_ARGUMENT: malformed YAML" in res.output


def test_pool_list_shows_usage_as_table_and_json(run, applied, socket_path) -> None:
    allocate(socket_path, "c1")
    res = run("pool", "list")
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert lines[0].split()[:6] == [
        "NAME",
        "VERSION",
        "SUBNET",
        "GATEWAY",
        "ALLOCATED",
        "TOTAL",
    ]
    assert lines[1].split()[:6] == [
        "gpu1-net11",
        "4",
        "172.16.11.0/24",
        "172.16.11.254",
        "1",
        "200",
    ]
    data = json.loads(run("pool", "list", "--json").output)
    by_name = {p["name"]: p for p in data["pools"]}
    assert by_name["gpu1-net11"]["allocatedIPCount"] == 1
    assert by_name["gpu1-v6"]["totalIPCount"] == 2**64 - 1


def test_pool_get_and_unknown_pool(run, applied) -> None:
    data = json.loads(run("pool", "get", "tiny", "--json").output)
    assert data["ips"] == ["172.16.12.1-172.16.12.2"]
    assert data["totalIPCount"] == 2
    res = run("pool", "get", "nope")
    assert res.exit_code == 1
    assert "NOT_FOUND: IPPool nope not found" in res.output


def test_pool_delete_refused_while_in_use(run, applied, socket_path) -> None:
    allocate(socket_path, "c1", pool="tiny")
    res = run("pool", "delete", "tiny")
    assert res.exit_code == 1
    assert "still has 1 allocated IPs" in res.output
    assert run("alloc", "release", "c1", "net1").exit_code == 0
    res = run("pool", "delete", "tiny")
    assert res.exit_code == 0 and "SpiderIPPool/tiny deleted" in res.output


def test_alloc_list_filters_and_release(run, applied, socket_path) -> None:
    allocate(socket_path, "c1")
    allocate(socket_path, "c2")
    rows = json.loads(run("alloc", "list", "--json", "--container-id", "c2").output)
    assert [(r["containerID"], r["ip"], r["address"]) for r in rows] == [
        ("c2", "172.16.11.2", "172.16.11.2/24")
    ]
    table = run("alloc", "list", "--pod-name", "c1").output
    assert "172.16.11.1" in table and "172.16.11.2" not in table
    res = run("alloc", "release", "--pool", "gpu1-net11", "--ip", "172.16.11.2")
    assert "released 1 address(es)" in res.output
    assert json.loads(run("alloc", "list", "--json").output)[0]["containerID"] == "c1"


def test_gc_keeps_only_the_valid_attachments(run, applied, socket_path) -> None:
    allocate(socket_path, "c1")
    allocate(socket_path, "c2")
    res = run("gc", "--network", "rail1", "--valid", "c1/net1", "--json")
    assert json.loads(res.output) == {"releasedAttachments": 1, "releasedAddresses": 1}
    assert run("gc", "--valid", "bogus").exit_code == 2


def test_gc_without_valid_list_needs_all(run, applied, socket_path) -> None:
    allocate(socket_path, "c1")
    res = run("gc")
    assert res.exit_code == 2 and "--all" in res.output
    assert json.loads(run("alloc", "list", "--json").output)[0]["containerID"] == "c1"
    res = run("gc", "--all", "--json")
    assert json.loads(res.output)["releasedAttachments"] == 1


def test_status_reports_ready(run, applied) -> None:
    data = json.loads(run("status", "--json").output)
    assert data["ready"] is True and data["pools"] == 3
