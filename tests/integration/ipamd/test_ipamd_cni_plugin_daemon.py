# SPDX-License-Identifier: Apache-2.0
"""railyard-ipam, the CNI IPAM plugin, run in-process against a real ipamd: the tests
that run the plugin against an ipamd serving on a unix socket.

The rest of them, in-process, are in tests/unit/ipamd/test_ipamd_cni_plugin.py (the unit
tier).
"""

from __future__ import annotations

import pytest

from cni.ipam.grpc_client import IpamdClient
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION
from tests.unit.ipamd.test_ipamd_cni_plugin import netconf, run

pytestmark = pytest.mark.integration


@pytest.fixture
def applied(socket_path: str, rails_yaml: str) -> str:
    with IpamdClient(socket_path) as c:
        c.stub.ApplyPools(
            pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=rails_yaml)
        )
    return socket_path


def test_add_returns_dual_stack_ips_and_pool_routes(applied: str) -> None:
    code, result = run("ADD", netconf(applied))
    assert code == 0, result
    assert result["ips"] == [
        {"address": "172.16.11.1/24", "gateway": "172.16.11.254"},
        {"address": "fd00:11::1/64"},
    ]
    assert result["routes"] == [{"dst": "10.10.0.0/16", "gw": "172.16.11.254"}]
    assert "interfaces" not in result


def test_add_records_pod_and_node_from_args_and_env(applied: str) -> None:
    run("ADD", netconf(applied, default_ipv6_ippool=[]))
    with IpamdClient(applied) as c:
        rows = c.stub.ListAllocations(
            pb.ListAllocationsRequest(client_version=API_VERSION)
        ).allocations
    assert [
        (r.pod_namespace, r.pod_name, r.pod_uid, r.node, r.network) for r in rows
    ] == [("ns", "pod-0", "u1", "node1", "rail1")]


def test_add_result_follows_the_config_version(applied: str) -> None:
    code, result = run("ADD", netconf(applied, version="0.4.0", default_ipv6_ippool=[]))
    assert code == 0
    assert result["ips"][0]["version"] == "4"


def test_runtime_requested_ip_is_allocated(applied: str) -> None:
    conf = netconf(applied, default_ipv6_ippool=[])
    conf["runtimeConfig"] = {"ips": ["172.16.11.50/24"]}
    code, result = run("ADD", conf)
    assert code == 0
    assert result["ips"][0]["address"] == "172.16.11.50/24"


def test_del_releases_and_check_then_fails(applied: str) -> None:
    conf = netconf(applied, default_ipv6_ippool=[])
    _, added = run("ADD", conf)
    conf_check = {**conf, "prevResult": added}
    assert run("CHECK", conf_check) == (0, None)
    assert run("DEL", conf) == (0, None)
    assert run("DEL", conf) == (0, None)  # idempotent
    code, err = run("CHECK", conf_check)
    assert code == 1 and err["code"] == 101


def test_check_fails_when_prev_result_has_an_address_ipamd_does_not_hold(
    applied: str,
) -> None:
    conf = netconf(applied, default_ipv6_ippool=[])
    run("ADD", conf)
    forged = {"cniVersion": "1.1.0", "ips": [{"address": "172.16.11.99/24"}]}
    code, err = run("CHECK", {**conf, "prevResult": forged})
    assert code == 1
    assert err["code"] == 106 and "172.16.11.99/24" in err["details"]


def test_exhausted_pool_is_error_101_naming_the_pool(applied: str) -> None:
    conf = netconf(applied, default_ipv4_ippool=["tiny"], default_ipv6_ippool=[])
    assert run("ADD", conf, cid="a")[0] == 0
    assert run("ADD", conf, cid="b")[0] == 0
    code, err = run("ADD", conf, cid="c")
    assert code == 1
    assert err["code"] == 101 and "tiny: exhausted" in err["msg"]


def test_gc_releases_attachments_missing_from_valid_list(applied: str) -> None:
    conf = netconf(applied, default_ipv6_ippool=[])
    run("ADD", conf, cid="keep")
    run("ADD", conf, cid="stale")
    gc_conf = {
        **conf,
        "cni.dev/valid-attachments": [{"containerID": "keep", "ifname": "net1"}],
    }
    assert run("GC", gc_conf) == (0, None)
    with IpamdClient(applied) as c:
        rows = c.stub.ListAllocations(
            pb.ListAllocationsRequest(client_version=API_VERSION)
        ).allocations
    assert [r.container_id for r in rows] == ["keep"]


def test_status_ok_when_ipamd_runs_and_50_when_it_is_down(applied, short_dir) -> None:
    assert run("STATUS", netconf(applied)) == (0, None)
    code, err = run("STATUS", netconf(str(short_dir / "down.sock"), timeout=0.5))
    assert code == 1 and err["code"] == 50
