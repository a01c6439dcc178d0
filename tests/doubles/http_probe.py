# SPDX-License-Identifier: Apache-2.0
"""Loopback HTTP for the tests of our servers: a free port, and ``/metrics``
read once the server answers."""

from __future__ import annotations

import socket
import time
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on (for a server to take)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_text(port: int, path: str = "/metrics", timeout: float = 20) -> str:
    """The body of ``GET path`` on 127.0.0.1:``port``, retried until the
    server answers or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}{path}", timeout=5
            ) as reply:
                return str(reply.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"nothing answered http://127.0.0.1:{port}{path} in {timeout}s"
                ) from None
            time.sleep(0.1)
