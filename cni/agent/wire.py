# SPDX-License-Identifier: Apache-2.0
"""The agent's side of the shim protocol (the shim's side is in ``cni.agent.shim``).

Frames: one kind byte, a 4-byte big-endian length, the payload. A request is
``P`` (CNI type), ``A`` (argv, NUL-separated), ``V`` (environment, NUL-separated
``KEY=VALUE``), ``I`` (stdin), then the shim shuts its write side. A reply is
any number of ``O`` (stdout) and ``E`` (stderr) frames and one ``X`` (exit
status, signed 4 bytes). Standard library only.
"""

from __future__ import annotations

import io
import socket
import threading
from dataclasses import dataclass, field

MAX_FRAME = 16 << 20  # a netconf with a big prevResult is kilobytes; this is a bound


class WireError(Exception):
    """The peer sent something that is not a request."""


@dataclass(slots=True)
class Request:
    plugin: str = ""
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes = b""


def frame(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _split(payload: bytes) -> list[bytes]:
    return payload.split(b"\0") if payload else []


def read_request(sock: socket.socket) -> Request:
    """Read frames until the shim's end of input; WireError if malformed."""
    req = Request()
    seen: set[bytes] = set()
    while True:
        head = _recv_exact(sock, 5)
        if head is None:
            break
        kind, size = head[:1], int.from_bytes(head[1:], "big")
        if size > MAX_FRAME:
            raise WireError(f"frame {kind!r} of {size} bytes is over the limit")
        payload = _recv_exact(sock, size) if size else b""
        if payload is None:
            raise WireError(f"request cut short in frame {kind!r}")
        seen.add(kind)
        if kind == b"P":
            req.plugin = payload.decode()
        elif kind == b"A":
            req.argv = [a.decode(errors="surrogateescape") for a in _split(payload)]
        elif kind == b"V":
            for item in _split(payload):
                key, eq, value = item.partition(b"=")
                if eq:
                    req.env[key.decode(errors="surrogateescape")] = value.decode(
                        errors="surrogateescape"
                    )
        elif kind == b"I":
            req.stdin = payload
        else:
            raise WireError(f"unknown frame kind {kind!r}")
    if not {b"P", b"V", b"I"} <= seen:
        raise WireError("incomplete request (needs plugin, environment and stdin)")
    return req


class ReplyStream(io.TextIOBase):
    """A text stream whose every write goes to the shim as one frame of ``kind``.

    Unbuffered on purpose: the deadline's watchdog writes the timeout error and
    exits the process at once, so nothing may wait in a buffer.
    """

    def __init__(self, sock: socket.socket, kind: bytes, lock: threading.Lock) -> None:
        super().__init__()
        self._sock = sock
        self._kind = kind
        self._lock = lock
        self.broken = False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text and not self.broken:
            data = frame(self._kind, text.encode(errors="surrogateescape"))
            with self._lock:
                try:
                    self._sock.sendall(data)
                except OSError:
                    # The shim is gone (its runtime killed it): finish the
                    # command anyway, so its rollback or record stays whole.
                    self.broken = True
        return len(text)

    def flush(self) -> None:
        pass


def send_status(sock: socket.socket, status: int, lock: threading.Lock) -> None:
    with lock:
        sock.sendall(frame(b"X", status.to_bytes(4, "big", signed=True)))
