# SPDX-License-Identifier: Apache-2.0
"""The gRPC API end to end: a real server on a temporary unix socket."""

from __future__ import annotations

import pytest

from cni.ipam import IpamError, IpamRequest
from cni.ipam.grpc_client import IpamdClient, reply_to_result, request_to_proto
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION
from ipamd.client import configured_endpoints


def rail(cid: str, **kw) -> IpamRequest:
    return IpamRequest(
        network="rail1",
        container_id=cid,
        ifname="net1",
        ipv4_pools=("gpu1-net11",),
        **kw,
    )


def test_daemon_down_is_try_again_for_allocate_and_50_for_status(short_dir) -> None:
    with IpamdClient(str(short_dir / "absent.sock"), timeout=0.05) as c:
        with pytest.raises(IpamError) as err:
            c.allocate(rail("c1"))
        assert err.value.code == 11
        with pytest.raises(IpamError) as err:
            c.release("rail1", "c1", "net1")
        assert err.value.code == 11
        with pytest.raises(IpamError) as err:
            c.status()
        assert err.value.code == 50


def test_proto_helpers_round_trip_the_plugin_records() -> None:
    req = IpamRequest(
        network="n",
        container_id="c",
        ifname="net1",
        netns="/x",
        pod_namespace="ns",
        pod_name="p",
        pod_uid="u",
        node_name="nd",
        ipv4_pools=("a", "b"),
        ipv6_pools=("c",),
        requested_ips=("10.0.0.1",),
        sticky=True,
    )
    msg = request_to_proto(req)
    assert msg.client_version == API_VERSION
    assert (msg.node, list(msg.ipv4_pools), msg.sticky) == ("nd", ["a", "b"], True)
    reply = pb.AllocateReply(
        ips=[
            pb.IPConfig(
                address="10.0.0.1/24", gateway="10.0.0.254", pool="a", version=4
            )
        ],
        routes=[pb.Route(dst="10.1.0.0/16")],
    )
    result = reply_to_result(reply)
    assert result.ips[0].address == "10.0.0.1/24"
    assert result.routes[0].gw is None


def test_client_target_is_ipam_socket_then_env_then_default() -> None:
    conf = {"ipam": {"type": "railyard", "socket": "/x/ipamd.sock", "timeout": 3}}
    env = {"RAILYARD_IPAMD_SOCKET": "/env/ipamd.sock"}
    with IpamdClient.from_netconf(conf, env) as c:
        assert (c.target, c.timeout) == ("/x/ipamd.sock", 3.0)
    with IpamdClient.from_netconf({"ipam": {"type": "spiderpool"}}, env) as c:
        assert c.target == "/env/ipamd.sock"
    # The default, resolved without looking at the machine's /run.
    assert configured_endpoints({}, {}) == ("/run/railyard/ipamd.sock",)
