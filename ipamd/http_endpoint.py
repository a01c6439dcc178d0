# SPDX-License-Identifier: Apache-2.0
"""A plain HTTP server on a daemon thread: ipamd's ``/metrics`` and health
probes, and the node's RDMA ``/metrics`` (``cni.exporter.server``). Standard
library only."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: How often the serve loop looks for a stop request: ``stop()`` waits up to
#: this long (the standard library's default is half a second).
STOP_POLL_SECONDS = 0.1


def parse_listen(listen: str, default_host: str = "") -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too; ``:port`` when ``default_host`` is
    given) -> (host without brackets, port); ValueError otherwise."""
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]") or default_host
    if not sep or not host or not port.isdigit():
        raise ValueError(f"listen address {listen!r}: expected HOST:PORT")
    return host, int(port)


class HttpEndpoint:
    """``handler`` served on ``host:port`` (an IPv6 host without brackets;
    port 0 picks one, ``port`` is then the bound one) until ``stop()``."""

    def __init__(
        self, host: str, port: int, handler: type[BaseHTTPRequestHandler], name: str
    ) -> None:
        server_class = type(
            "IpamdHttpServer",
            (ThreadingHTTPServer,),
            {"address_family": socket.AF_INET6 if ":" in host else socket.AF_INET},
        )
        self._server = server_class((host, port), handler)
        self.port = int(self._server.server_address[1])
        #: ``host:port`` as a URL takes it (an IPv6 host in brackets).
        self.address = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(STOP_POLL_SECONDS,),
            name=name,
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
