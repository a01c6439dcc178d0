# SPDX-License-Identifier: Apache-2.0
"""A Kubernetes API server played on loopback, over real TLS.

No API server exists on our machines; the code that reads one (the webhook,
the exporter's owner labels) is tested against this replay: HTTPS with a
certificate openssl makes for 127.0.0.1, a bearer token checked as the API
server checks it, and answers in the API's exact JSON (objects, lists, and
``Status`` documents for 401/403/404). The test supplies ``answer(path,
query) -> (code, body)``; every request is recorded. A body given as bytes is
sent as it is (an answer cut short, say).
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "eyJhbGciOiJSUzI1NiJ9.replayed-service-account-token"

Answer = Callable[[str, dict[str, list[str]]], tuple[int, Any]]


@dataclass(frozen=True)
class Tls:
    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))


def make_tls(folder: Path, cn: str = "railyard-webhook.railyard.svc") -> Tls:
    """A self-signed certificate for 127.0.0.1 (and ``cn``), made by openssl."""
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is needed to make the test certificate")
    cert, key = folder / "tls.crt", folder / "tls.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "1",
            "-subj", f"/CN={cn}",
            "-addext", f"subjectAltName=IP:127.0.0.1,DNS:{cn}",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return Tls(cert, key)


def authorized(header: str) -> bool:
    """A bearer token, as the API server reads it (the scheme is
    case-insensitive, RFC 7235; the Python client writes "bearer")."""
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and token == TOKEN


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    """A ``Status`` document, as the API answers a failed request."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


def not_found() -> tuple[int, dict[str, Any]]:
    return 404, status(
        404, "NotFound", "the server could not find the requested resource"
    )


@dataclass
class Replay:
    """A running replay server: its port and what it was asked."""

    port: int = 0
    requests: list[tuple[str, dict[str, list[str]], str]] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [path for path, _, _ in self.requests]

    def kubeconfig(self, folder: Path, tls: Tls, user: str = "railyard") -> Path:
        """A kubeconfig for this server with the replayed token."""
        path = folder / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "replay",
                            "cluster": {
                                "server": f"https://127.0.0.1:{self.port}",
                                "certificate-authority": str(tls.cert),
                            },
                        }
                    ],
                    "users": [{"name": user, "user": {"token": TOKEN}}],
                    "contexts": [
                        {
                            "name": "replay",
                            "context": {"cluster": "replay", "user": user},
                        }
                    ],
                    "current-context": "replay",
                }
            )
        )
        return path


@contextmanager
def serve_api(tls: Tls, answer: Answer) -> Iterator[Replay]:
    """Serve ``answer`` over HTTPS on 127.0.0.1 until the block ends."""
    replay = Replay()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            header = self.headers.get("Authorization", "")
            replay.requests.append((url.path, query, header))
            if not authorized(header):
                code, body = 401, status(401, "Unauthorized", "Unauthorized")
            else:
                code, body = answer(url.path, query)
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tls.cert), str(tls.key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    replay.port = server.server_address[1]
    try:
        yield replay
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
