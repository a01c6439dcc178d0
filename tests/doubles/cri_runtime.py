# SPDX-License-Identifier: Apache-2.0
"""A container runtime's CRI (``runtime.v1.RuntimeService``) played on a unix
socket: ``ListPodSandbox`` and ``Version`` only.

Its answers are bytes encoded here by hand from k8s.io/cri-api's ``api.proto``
field numbers, not with the client's message declarations, so a test checks
those declarations against the wire.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc


@dataclass(frozen=True)
class FakeSandbox:
    id: str
    name: str = "pod"
    uid: str = "uid"
    namespace: str = "default"
    ready: bool = True


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


def _sandbox(s: FakeSandbox) -> bytes:
    metadata = (
        _field(1, s.name.encode())
        + _field(2, s.uid.encode())
        + _field(3, s.namespace.encode())
        + _varint(4 << 3) + _varint(1)  # attempt 1
    )  # fmt: skip
    body = _field(1, s.id.encode()) + _field(2, metadata)
    if not s.ready:
        body += _varint(3 << 3) + _varint(1)  # SANDBOX_NOTREADY
    body += _varint(4 << 3) + _varint(1_700_000_000_000_000_000)  # created_at
    return body


def list_reply(sandboxes: Sequence[FakeSandbox]) -> bytes:
    """ListPodSandboxResponse: ``repeated PodSandbox items = 1``."""
    return b"".join(_field(1, _sandbox(s)) for s in sandboxes)


VERSION_REPLY = (
    _field(1, b"0.1.0")
    + _field(2, b"containerd")
    + _field(3, b"v1.7.24")
    + _field(4, b"v1")
)


@contextmanager
def serve_cri(sandboxes: Callable[[], Sequence[FakeSandbox]]) -> Iterator[Path]:
    """A runtime whose sandbox list is ``sandboxes()`` at each call; yields its
    socket (in a fresh short temp dir, removed at the end)."""
    folder = Path(tempfile.mkdtemp(prefix="ry-cri-"))
    sock = folder / "containerd.sock"
    server = grpc.server(futures.ThreadPoolExecutor(2))

    def unary(reply: Callable[[], bytes]) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: reply(),
            request_deserializer=lambda raw: raw,
            response_serializer=lambda raw: raw,
        )

    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "runtime.v1.RuntimeService",
                {
                    "ListPodSandbox": unary(lambda: list_reply(sandboxes())),
                    "Version": unary(lambda: VERSION_REPLY),
                },
            ),
        )
    )
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        yield sock
    finally:
        server.stop(None)
        shutil.rmtree(folder, ignore_errors=True)
