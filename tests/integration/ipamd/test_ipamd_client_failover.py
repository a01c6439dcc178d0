# SPDX-License-Identifier: Apache-2.0
"""ipamd.client across several endpoints: failover without duplicates.

Real in-process gRPC servers on unix sockets in a temp dir: a real ipamd (the
active), a server refusing everything with UNAVAILABLE and answering Status
"not ready" (what a standby replica does), a socket nobody listens on
(connection refused), and a proxy that commits through the active and then
stalls past the attempt's deadline (a hung active).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from cni.errors import INVALID_CONFIG, STATUS_UNAVAILABLE, TRY_AGAIN_LATER, CniError
from cni.ipam import IpamError, IpamRequest
from cni.ipam.grpc_client import IpamdClient as PluginClient
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION
from ipamd.client import (
    IpamdCallError,
    IpamdClient,
    configured_endpoints,
    parse_endpoints,
)
from ipamd.server import Daemon, build
from ipamd.settings import Settings

pytestmark = pytest.mark.integration

POOL = """
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: rail1-pool}
spec: {subnet: 172.16.11.0/24, ips: [172.16.11.1-172.16.11.200]}
"""


def request(cid: str) -> IpamRequest:
    return IpamRequest(
        network="rail1", container_id=cid, ifname="net1", ipv4_pools=("rail1-pool",)
    )


class FakeServer:
    """A gRPC server on a unix socket whose every method is ``handler``."""

    def __init__(self, path: Path, handler: Callable[[str, Any, Any], Any]) -> None:
        self.calls: Counter[str] = Counter()
        self.path = path
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        outer = self

        class Generic(grpc.GenericRpcHandler):
            def service(self, details: Any) -> Any:
                method = details.method.rsplit("/", 1)[-1]

                def unary(req: bytes, context: Any) -> Any:
                    outer.calls[method] += 1
                    return handler(method, req, context)

                return grpc.unary_unary_rpc_method_handler(unary)

        server.add_generic_rpc_handlers((Generic(),))
        server.add_insecure_port(f"unix://{path}")
        server.start()
        self.server = server

    def stop(self) -> None:
        self.server.stop(None)


def standby(method: str, raw: bytes, context: Any) -> bytes:
    """What a standby replica answers: not ready, and no allocations."""
    if method == "Status":
        reply = pb.StatusReply(ready=False, message="standby", api_version="1.0")
        return reply.SerializeToString()
    context.abort(grpc.StatusCode.UNAVAILABLE, "standby: not the active replica")
    raise AssertionError("abort returns only by raising")


@pytest.fixture
def active(short_dir: Path) -> Iterator[Daemon]:
    d = build(Settings(db_url="memory", listen=str(short_dir / "active.sock")))
    try:
        with IpamdClient(d.address) as c:
            c.call(
                "ApplyPools",
                pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=POOL),
            )
        yield d
    finally:
        d.stop(grace=None)


@pytest.fixture
def standby_server(short_dir: Path) -> Iterator[FakeServer]:
    s = FakeServer(short_dir / "standby.sock", standby)
    try:
        yield s
    finally:
        s.stop()


def allocations(daemon: Daemon) -> list[tuple[str, str, str]]:
    with IpamdClient(daemon.address) as c:
        reply = c.call(
            "ListAllocations", pb.ListAllocationsRequest(client_version=API_VERSION)
        )
    return [(a.container_id, a.ifname, a.ip) for a in reply.allocations]


def active_path(daemon: Daemon) -> str:
    assert daemon.socket is not None
    return str(daemon.socket)


def test_allocate_moves_past_a_standby_to_the_active(active, standby_server) -> None:
    endpoints = [str(standby_server.path), active_path(active)]
    with PluginClient(endpoints, timeout=5) as c:
        got = c.allocate(request("c1"))
    assert [ip.address for ip in got.ips] == ["172.16.11.1/24"]
    assert standby_server.calls["Allocate"] == 1
    assert allocations(active) == [("c1", "net1", "172.16.11.1")]


def test_connection_refused_moves_on_to_the_next_endpoint(active, short_dir) -> None:
    nobody = short_dir / "nobody.sock"  # no server ever listened here
    with PluginClient([str(nobody), active_path(active)], timeout=5) as c:
        assert c.allocate(request("c1")).ips[0].address == "172.16.11.1/24"


def test_the_endpoint_that_answered_is_tried_first_next_time(
    active, standby_server
) -> None:
    endpoints = [str(standby_server.path), active_path(active)]
    with PluginClient(endpoints, timeout=5) as c:
        c.allocate(request("c1"))
        c.allocate(request("c2"))
        c.release("rail1", "c1", "net1")
    assert standby_server.calls == Counter({"Allocate": 1})


def test_a_retry_after_a_stalled_commit_returns_the_same_address(
    active, short_dir
) -> None:
    # The hung active: it commits the allocation, then never answers in time.
    # The client resends to the next endpoint; ipamd keys allocations by
    # (container ID, ifname), so the resend gets the same lease and no new one.
    with IpamdClient(active.address) as upstream:

        def commit_then_stall(method: str, raw: bytes, context: Any) -> bytes:
            reply = upstream.call(method, pb.AllocateRequest.FromString(raw))
            time.sleep(1.0)
            return bytes(reply.SerializeToString())

        hung = FakeServer(short_dir / "hung.sock", commit_then_stall)
        try:
            client = IpamdClient(
                [str(hung.path), active_path(active)], timeout=5, attempt_timeout=0.3
            )
            with PluginClient(client) as c:
                got = c.allocate(request("c1"))
        finally:
            hung.stop()
    assert hung.calls["Allocate"] == 1
    assert [ip.address for ip in got.ips] == ["172.16.11.1/24"]
    assert allocations(active) == [("c1", "net1", "172.16.11.1")]


def test_only_standbys_fail_with_try_again_after_the_deadline(standby_server) -> None:
    start = time.monotonic()
    with PluginClient([str(standby_server.path)], timeout=0.6) as c:
        with pytest.raises(IpamError) as err:
            c.allocate(request("c1"))
    elapsed = time.monotonic() - start
    assert err.value.code == TRY_AGAIN_LATER
    assert "standby: not the active replica" in err.value.details
    assert 0.6 <= elapsed < 2.0
    # Retried (with backoff) for the whole deadline, not once.
    assert standby_server.calls["Allocate"] >= 3


def test_an_add_during_a_failover_succeeds_once_the_standby_takes_over(
    short_dir,
) -> None:
    # Both endpoints refuse at first (one standby, one dead socket); the new
    # active comes up on the second 0.5 s later, within the ADD's deadline,
    # with the pools the database already holds.
    db = f"sqlite:///{short_dir / 'ipamd.db'}"
    first = build(Settings(db_url=db, listen=str(short_dir / "first.sock")))
    with IpamdClient(first.address) as c:
        c.call(
            "ApplyPools",
            pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=POOL),
        )
    first.stop(grace=None)
    promoted = short_dir / "promoted.sock"
    refusing = FakeServer(short_dir / "standby.sock", standby)
    started: list[Daemon] = []

    def take_over() -> None:
        time.sleep(0.5)
        started.append(build(Settings(db_url=db, listen=str(promoted))))

    thread = threading.Thread(target=take_over)
    thread.start()
    try:
        with PluginClient([str(refusing.path), str(promoted)], timeout=10) as c:
            got = c.allocate(request("c1"))
        assert got.ips[0].address == "172.16.11.1/24"
    finally:
        thread.join()
        refusing.stop()
        for d in started:
            d.stop(grace=None)


def test_a_refusal_by_the_active_is_not_retried(active, standby_server) -> None:
    endpoints = [active_path(active), str(standby_server.path)]
    with IpamdClient(endpoints, timeout=5) as c:
        with pytest.raises(IpamdCallError) as err:
            c.call(
                "GetPool", pb.GetPoolRequest(client_version=API_VERSION, name="nope")
            )
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    assert standby_server.calls["GetPool"] == 0


def test_status_reports_the_active_behind_a_standby(active, standby_server) -> None:
    endpoints = [str(standby_server.path), active_path(active)]
    with PluginClient(endpoints, timeout=5) as c:
        c.status()  # no error: the active is ready
    with PluginClient([str(standby_server.path)], timeout=5) as c:
        with pytest.raises(IpamError) as err:
            c.status()
    assert err.value.code == STATUS_UNAVAILABLE and err.value.details == "standby"


@pytest.mark.parametrize(
    ("ipam", "env", "expected"),
    [
        (
            {"endpoints": ["/run/a.sock", "/run/b.sock"]},
            {},
            ("/run/a.sock", "/run/b.sock"),
        ),
        ({"endpoints": "/run/a.sock, /run/b.sock"}, {}, ("/run/a.sock", "/run/b.sock")),
        ({"socket": "/run/a.sock"}, {}, ("/run/a.sock",)),
        ({"socket": "/run/a.sock,ipamd-1:7443"}, {}, ("/run/a.sock", "ipamd-1:7443")),
        ({}, {"RAILYARD_IPAMD_SOCKET": "/x.sock,/y.sock"}, ("/x.sock", "/y.sock")),
        ({"socket": "/s.sock"}, {"RAILYARD_IPAMD_SOCKET": "/e.sock"}, ("/s.sock",)),
        ({}, {}, ("/run/railyard/ipamd.sock",)),
    ],
)
def test_endpoints_come_from_config_then_env_then_default(ipam, env, expected) -> None:
    # Resolved without looking at the paths: the default is the machine's.
    assert configured_endpoints(ipam, env) == expected


@pytest.mark.parametrize(
    "timeout",
    [0, -1, True, "5", 10**100, 2**64, float("nan"), float("inf"), -0.5, [5]],
)
def test_an_unusable_timeout_is_refused(timeout) -> None:
    # Falling back silently would hide the operator's mistake (NaN, a string)
    # behind a 30 s default they did not ask for.
    with pytest.raises(ValueError, match="ipam timeout must be a number"):
        IpamdClient.from_config({"timeout": timeout}, {})


def test_no_timeout_means_the_default(tmp_path) -> None:
    socket = {"socket": str(tmp_path / "ipamd.sock")}
    with IpamdClient.from_config(socket, {}) as c:
        assert c.timeout == 30.0
    with IpamdClient.from_config({**socket, "timeout": 2.5}, {}) as c:
        assert c.timeout == 2.5


def test_a_socket_path_that_is_not_a_socket_is_refused(tmp_path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    for target in (str(plain), str(tmp_path), f"unix://{plain}"):
        with pytest.raises(ValueError, match="is not a socket"):
            IpamdClient.from_config({"socket": target}, {})
    # Missing is fine: ipamd may be starting and is retried until the deadline.
    with IpamdClient.from_config({"socket": str(tmp_path / "nope.sock")}, {}) as c:
        assert c.targets == (str(tmp_path / "nope.sock"),)


def test_blank_endpoints_are_dropped_and_none_at_all_is_refused() -> None:
    assert parse_endpoints(" a.sock ,, b.sock ,") == ("a.sock", "b.sock")
    with pytest.raises(ValueError, match="no ipamd endpoint"):
        IpamdClient(" , ")


@pytest.mark.parametrize("endpoints", [5, ["/a.sock", 7], {"a": 1}, True])
def test_endpoints_of_another_type_are_a_config_error(endpoints) -> None:
    with pytest.raises(ValueError, match="list of strings or one comma-separated"):
        IpamdClient.from_config({"endpoints": endpoints}, {})
    netconf = {"ipam": {"type": "railyard", "endpoints": endpoints}}
    with pytest.raises(CniError) as err:
        PluginClient.from_netconf(netconf, {})
    assert err.value.code == INVALID_CONFIG


def test_the_plugin_client_stops_retrying_when_the_command_deadline_is_near(
    tmp_path: Path,
) -> None:
    """Only standbys answer: the failover loop would retry for ipam.timeout
    (30 s here), past the ADD's deadline. Bounded by the budget the command
    has left, it answers 11 in time, and says nothing was changed."""
    server = FakeServer(tmp_path / "standby.sock", standby)
    try:
        left = [1.0]
        client = PluginClient(
            [str(tmp_path / "standby.sock")], timeout=30.0, budget=lambda: left[0]
        )
        start = time.monotonic()
        with pytest.raises(IpamError) as info:
            client.allocate(request("c-budget"))
        spent = time.monotonic() - start
        assert info.value.code == TRY_AGAIN_LATER
        assert info.value.unchanged  # every attempt was refused: nothing held
        assert 0.8 < spent < 3.0, spent
        left[0] = 0.0
        with pytest.raises(IpamError) as info:
            client.release("rail1", "c-budget", "net1")
        assert info.value.code == TRY_AGAIN_LATER
        assert "no time left" in info.value.msg
        client.close()
    finally:
        server.stop()


def test_a_timed_out_attempt_is_not_unchanged() -> None:
    from ipamd.client import Attempt

    err = IpamdCallError(
        "Allocate",
        [
            Attempt("a", grpc.StatusCode.UNAVAILABLE, "refused"),
            Attempt("b", grpc.StatusCode.DEADLINE_EXCEEDED, "slow"),
        ],
    )
    assert err.unreachable and not err.changed_nothing
