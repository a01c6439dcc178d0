# SPDX-License-Identifier: Apache-2.0
"""``cni.agent.cri`` against a CRI runtime played on a unix socket.

The fake runtime answers ``runtime.v1.RuntimeService`` with bytes encoded by
hand from k8s.io/cri-api's ``api.proto`` field numbers, so the client's
message declarations are checked against the wire, not against themselves.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from cni.agent.cri import CriSandboxes, CriUnavailable, resolve_socket

pytestmark = pytest.mark.integration


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _sandbox(sid: str, name: str, uid: str, ns: str, state: int) -> bytes:
    metadata = (
        _field(1, name.encode())
        + _field(2, uid.encode())
        + _field(3, ns.encode())
        + _varint(4 << 3) + _varint(1)  # attempt 1
    )  # fmt: skip
    body = _field(1, sid.encode()) + _field(2, metadata)
    if state:
        body += _varint(3 << 3) + _varint(state)  # SANDBOX_NOTREADY
    body += _varint(4 << 3) + _varint(1_700_000_000_000_000_000)  # created_at
    return body


LIST_REPLY = _field(1, _sandbox("sb-ready", "web-0", "uid-1", "default", 0)) + _field(
    1, _sandbox("sb-stopped", "job-x", "uid-2", "batch", 1)
)
VERSION_REPLY = (
    _field(1, b"0.1.0")
    + _field(2, b"containerd")
    + _field(3, b"v1.7.24")
    + _field(4, b"v1")
)


@pytest.fixture
def runtime() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="i24-cri-"))
    sock = folder / "containerd.sock"
    server = grpc.server(futures.ThreadPoolExecutor(2))

    def unary(reply: bytes) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: reply,
            request_deserializer=lambda raw: raw,
            response_serializer=lambda raw: raw,
        )

    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "runtime.v1.RuntimeService",
                {"ListPodSandbox": unary(LIST_REPLY), "Version": unary(VERSION_REPLY)},
            ),
        )
    )
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        yield sock
    finally:
        server.stop(None)
        sock.unlink(missing_ok=True)
        folder.rmdir()


def test_every_sandbox_the_runtime_knows_is_listed_ready_or_not(runtime: Path) -> None:
    cri = CriSandboxes(str(runtime))
    sandboxes = {s.id: s for s in cri.list()}
    assert set(sandboxes) == {"sb-ready", "sb-stopped"}
    ready = sandboxes["sb-ready"]
    assert (ready.name, ready.uid, ready.namespace, ready.ready) == (
        "web-0",
        "uid-1",
        "default",
        True,
    )
    assert sandboxes["sb-stopped"].ready is False
    assert cri.runtime() == "containerd v1.7.24"


def test_a_runtime_that_does_not_answer_is_unavailable(tmp_path: Path) -> None:
    cri = CriSandboxes(str(tmp_path / "no-such.sock"), timeout=0.5)
    with pytest.raises(CriUnavailable, match="ListPodSandbox"):
        cri.list()
    # auto, on a host with no runtime socket (yet): asked again next time.
    absent = (tmp_path / "containerd.sock", tmp_path / "crio.sock")
    auto = CriSandboxes("auto", timeout=0.5, known=absent)
    with pytest.raises(CriUnavailable, match="no container runtime socket"):
        auto.list()


def test_auto_takes_the_first_runtime_socket_present(tmp_path: Path) -> None:
    containerd, crio = tmp_path / "containerd.sock", tmp_path / "crio.sock"
    crio.touch()
    assert resolve_socket("auto", (containerd, crio)) == crio
    containerd.touch()
    assert resolve_socket("auto", (containerd, crio)) == containerd
    assert resolve_socket("", (containerd, crio)) is None
    assert resolve_socket("/x/cri.sock") == Path("/x/cri.sock")
