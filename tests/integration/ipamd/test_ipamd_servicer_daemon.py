# SPDX-License-Identifier: Apache-2.0
"""The gRPC API end to end: a real server on a temporary unix socket: the tests that
talk to an ipamd serving on a unix socket.

The rest of them, in-process, are in tests/unit/ipamd/test_ipamd_servicer.py (the unit
tier).
"""

from __future__ import annotations

import stat

import grpc
import pytest

from cni.ipam import Attachment, IpamError, IpamRequest
from cni.ipam.grpc_client import IpamdClient, request_to_proto
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION
from tests.unit.ipamd.test_ipamd_servicer import rail

pytestmark = pytest.mark.integration

V = API_VERSION


@pytest.fixture
def client(socket_path: str, rails_yaml: str):
    c = IpamdClient(socket_path, timeout=5)
    c.stub.ApplyPools(pb.ApplyPoolsRequest(client_version=V, manifest=rails_yaml))
    try:
        yield c
    finally:
        c.close()


def test_socket_is_private_to_root(daemon) -> None:
    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(daemon.socket.parent.stat().st_mode) == 0o700


def test_allocate_returns_cidr_gateway_and_pool_routes(client) -> None:
    result = client.allocate(rail("c1", ipv6_pools=("gpu1-v6",)))
    assert [(a.address, a.gateway, a.pool, a.version) for a in result.ips] == [
        ("172.16.11.1/24", "172.16.11.254", "gpu1-net11", 4),
        ("fd00:11::1/64", None, "gpu1-v6", 6),
    ]
    assert [(r.dst, r.gw) for r in result.routes] == [("10.10.0.0/16", "172.16.11.254")]


def test_allocate_retry_returns_the_same_address(client) -> None:
    first = client.allocate(rail("c1"))
    assert client.allocate(rail("c1")).ips == first.ips
    listed = client.stub.ListAllocations(pb.ListAllocationsRequest(client_version=V))
    assert len(listed.allocations) == 1


def test_check_returns_held_addresses_and_fails_after_release(client) -> None:
    client.allocate(rail("c1"))
    assert client.check("rail1", "c1", "net1").ips[0].address == "172.16.11.1/24"
    client.release("rail1", "c1", "net1")
    with pytest.raises(IpamError) as err:
        client.check("rail1", "c1", "net1")
    assert err.value.code == 101
    assert "no allocation for container c1" in err.value.msg


def test_release_without_allocation_succeeds(client) -> None:
    client.release("rail1", "never", "net1")
    client.release("", "never", "net1")


def test_exhausted_pool_is_cni_101_with_ipamds_reason(client) -> None:
    tiny = dict(network="rail1", ifname="net1", ipv4_pools=("tiny",))
    client.allocate(IpamRequest(container_id="a", **tiny))
    client.allocate(IpamRequest(container_id="b", **tiny))
    with pytest.raises(IpamError) as err:
        client.allocate(IpamRequest(container_id="c", **tiny))
    assert err.value.code == 101
    assert "tiny: exhausted (2/2 addresses used)" in err.value.msg
    assert "RESOURCE_EXHAUSTED" in err.value.details


@pytest.mark.parametrize(
    ("request_kw", "code"),
    [
        ({"ipv4_pools": ("nope",)}, grpc.StatusCode.NOT_FOUND),
        (
            {"ipv4_pools": ("gpu1-net11",), "requested_ips": ("172.16.99.1",)},
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            {"ipv4_pools": ("tiny",), "requested_ips": ("bogus",)},
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ],
)
def test_bad_allocate_requests_get_a_status_and_change_nothing(
    client, request_kw, code
) -> None:
    req = IpamRequest(network="n", container_id="c", ifname="net1", **request_kw)
    with pytest.raises(grpc.RpcError) as err:
        client.stub.Allocate(request_to_proto(req))
    assert err.value.code() == code
    assert err.value.details()
    listed = client.stub.ListAllocations(pb.ListAllocationsRequest(client_version=V))
    assert list(listed.allocations) == []


def test_incompatible_client_version_is_failed_precondition(client) -> None:
    with pytest.raises(grpc.RpcError) as err:
        client.stub.Status(pb.StatusRequest(client_version="2.0"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "not compatible" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        client.stub.Status(pb.StatusRequest())
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_gc_releases_attachments_not_in_the_valid_list(client) -> None:
    client.allocate(rail("keep"))
    client.allocate(rail("stale", ipv6_pools=("gpu1-v6",)))
    assert client.gc("rail1", [Attachment("keep", "net1")]) == 1
    listed = client.stub.ListAllocations(pb.ListAllocationsRequest(client_version=V))
    assert [a.container_id for a in listed.allocations] == ["keep"]


def test_status_is_ready_with_counts(client) -> None:
    client.status()
    client.allocate(rail("c1"))
    reply = client.stub.Status(pb.StatusRequest(client_version=V))
    assert reply.ready and reply.pools == 3 and reply.allocations == 1


def test_pool_usage_counts_follow_allocations(client) -> None:
    client.allocate(rail("c1"))
    info = client.stub.GetPool(pb.GetPoolRequest(client_version=V, name="gpu1-net11"))
    assert (info.total_count, info.allocated_count) == ("200", "1")
    v6 = client.stub.GetPool(pb.GetPoolRequest(client_version=V, name="gpu1-v6"))
    assert int(v6.total_count) == 2**64 - 1


def test_malformed_manifest_is_invalid_argument_and_changes_nothing(
    client, rails_yaml
) -> None:
    bad = rails_yaml.replace("172.16.12.1-172.16.12.2", "172.16.13.1")
    bad = bad.replace("gpu1-net11", "gpu1-new")
    with pytest.raises(grpc.RpcError) as err:
        client.stub.ApplyPools(pb.ApplyPoolsRequest(client_version=V, manifest=bad))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not pertains to the 'spec.subnet'" in err.value.details()
    listed = client.stub.ListPools(pb.ListPoolsRequest(client_version=V))
    assert sorted(p.pool.name for p in listed.pools) == [
        "gpu1-net11",
        "gpu1-v6",
        "tiny",
    ]


def test_delete_pool_with_allocations_is_refused_then_allowed(client) -> None:
    client.allocate(
        IpamRequest(network="n", container_id="a", ifname="net1", ipv4_pools=("tiny",))
    )
    req = pb.DeletePoolRequest(client_version=V, name="tiny")
    with pytest.raises(grpc.RpcError) as err:
        client.stub.DeletePool(req)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    client.release("n", "a", "net1")
    client.stub.DeletePool(req)
    with pytest.raises(grpc.RpcError) as err:
        client.stub.GetPool(pb.GetPoolRequest(client_version=V, name="tiny"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_pools_given_as_messages_are_validated_like_yaml(client) -> None:
    pool = pb.Pool(
        name="gpu2-net12",
        subnet="172.16.12.0/24",
        ips=["172.16.12.100-172.16.12.110"],
        gateway="172.16.12.105",
    )
    with pytest.raises(grpc.RpcError) as err:
        client.stub.ApplyPools(pb.ApplyPoolsRequest(client_version=V, pools=[pool]))
    assert "conflicts with 'spec.gateway'" in err.value.details()


def test_allocations_survive_a_daemon_restart(short_dir, rails_yaml) -> None:
    from ipamd.server import build
    from ipamd.settings import Settings

    settings = Settings(
        db_url=f"sqlite:///{short_dir / 'r.db'}",
        listen=str(short_dir / "r.sock"),
    )
    d = build(settings)
    try:
        with IpamdClient(str(d.socket)) as c:
            c.stub.ApplyPools(
                pb.ApplyPoolsRequest(client_version=V, manifest=rails_yaml)
            )
            first = c.allocate(rail("c1"))
    finally:
        d.stop(grace=None)
    d = build(settings)
    try:
        with IpamdClient(str(d.socket)) as c:
            assert c.check("rail1", "c1", "net1").ips == first.ips
            assert c.allocate(rail("c2")).ips[0].address == "172.16.11.2/24"
    finally:
        d.stop(grace=None)
