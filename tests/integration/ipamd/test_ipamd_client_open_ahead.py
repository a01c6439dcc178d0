# SPDX-License-Identifier: Apache-2.0
"""ipamd.client.open_ahead: a channel opened before the call that uses it.

A spare worker of the node agent opens (and connects) the channel to ipamd
while it waits for a request; the plugin's client then finds it. Real gRPC
channels on unix sockets in a temp dir; the server is an in-process gRPC
server answering Status.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from ipamd import client as transport
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.client import IpamdClient, open_ahead, open_channel
from tests.doubles.ipamd_channels import no_channels_left  # noqa: F401

pytestmark = pytest.mark.integration

CALLS: list[str] = []


@pytest.fixture
def ipamd_socket(tmp_path: Path) -> Iterator[Path]:
    """A gRPC server answering every method with a ready Status."""
    path = tmp_path / "ipamd.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    CALLS.clear()

    class Ready(grpc.GenericRpcHandler):
        def service(self, details: Any) -> Any:
            def unary(req: bytes, context: Any) -> bytes:
                CALLS.append(details.method.rsplit("/", 1)[-1])
                return pb.StatusReply(ready=True, api_version="1.0").SerializeToString()

            return grpc.unary_unary_rpc_method_handler(unary)

    server.add_generic_rpc_handlers((Ready(),))
    server.add_insecure_port(f"unix://{path}")
    server.start()
    try:
        yield path
    finally:
        server.stop(None)


def test_the_next_client_of_the_endpoint_uses_the_channel_opened_ahead(
    ipamd_socket: Path,
):
    assert open_ahead([str(ipamd_socket)], wait=5.0) == 1
    ahead = transport._OPENED_AHEAD[(f"unix://{ipamd_socket}", None, None, None)]
    assert CALLS == ["Status"]  # connected by one call, before any client

    next_client_uses(ipamd_socket, ahead)


def next_client_uses(ipamd_socket: Path, channel: grpc.Channel) -> None:
    """A new client of the endpoint answers over ``channel`` (no dial of its
    own: the second Status the server sees), then is closed."""
    client = IpamdClient(f"unix://{ipamd_socket}", timeout=5.0)
    try:
        assert client.status().ready
        assert client._channels[client.target] is channel
        assert CALLS == ["Status", "Status"]
    finally:
        client.close()


def test_a_channel_opened_ahead_is_handed_out_once(tmp_path: Path):
    sock = str(tmp_path / "ipamd.sock")
    open_ahead([sock], wait=0)
    first = open_channel(sock)
    second = open_channel(sock)
    try:
        assert first is not second
        assert not transport._OPENED_AHEAD
    finally:
        first.close()
        second.close()


def test_another_endpoint_or_other_tls_files_open_their_own_channel(tmp_path: Path):
    sock = str(tmp_path / "ipamd.sock")
    open_ahead([sock], wait=0)
    other = open_channel(str(tmp_path / "other.sock"))
    with_ca = open_channel(sock, tls_ca=tmp_path / "ca.pem")
    try:
        assert list(transport._OPENED_AHEAD) == [(f"unix://{sock}", None, None, None)]
    finally:
        other.close()
        with_ca.close()


def test_an_endpoint_nobody_serves_is_kept_unconnected_within_the_wait(
    tmp_path: Path,
):
    # Two replicas named, none up: both kept, gRPC dials again at the call.
    socks = [str(tmp_path / "a.sock"), str(tmp_path / "b.sock")]
    assert open_ahead(socks, wait=0.2) == 0
    assert len(transport._OPENED_AHEAD) == 2


def test_a_closed_client_closes_its_channels_by_default(ipamd_socket: Path):
    client = IpamdClient(f"unix://{ipamd_socket}", timeout=5.0)
    assert client.status().ready
    client.close()
    assert not transport._OPENED_AHEAD


def test_a_process_that_keeps_channels_hands_them_to_its_next_client(
    ipamd_socket: Path,
):
    # A node agent's worker between two requests: no dial, no connection.
    transport.keep_channels()
    first = IpamdClient(f"unix://{ipamd_socket}", timeout=5.0)
    assert first.status().ready
    used = first._channels[first.target]
    first.close()
    next_client_uses(ipamd_socket, used)
    # Kept again for the one after; one channel per endpoint, not one per client.
    assert list(transport._OPENED_AHEAD.values()) == [used]
