# SPDX-License-Identifier: Apache-2.0
"""The admission endpoint: AdmissionReview (admission.k8s.io/v1) over HTTPS.

``POST /mutate--v1-pod`` (Spiderpool's path) takes the API server's review of
a pod CREATE and answers with a base64 JSONPatch (``patchType: JSONPatch``),
no patch when the pod asks for nothing, or a denial whose message says why
(the MutatingWebhookConfiguration's ``failurePolicy: Fail`` makes that, and an
unreachable webhook, refuse the pod rather than start it without its NICs).
``GET /healthz`` is the probe. The API server requires TLS; the standard
library's ``http.server`` and ``ssl`` serve it, one thread per connection.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from railyard.webhook.kube import KubeError, NetworkSource
from railyard.webhook.selection import (
    InjectError,
    Network,
    inject_request,
    patch_for,
    select,
)

MUTATE_PATH = "/mutate--v1-pod"
HEALTH_PATH = "/healthz"
MAX_BODY = 8 << 20  # the API server caps request objects far below this

log = logging.getLogger("railyard.webhook")


def review(body: Mapping[str, Any], source: NetworkSource) -> dict[str, Any]:
    """The AdmissionReview answering ``body``."""
    request = body.get("request") or {}
    uid = request.get("uid", "")
    api_version = body.get("apiVersion") or "admission.k8s.io/v1"

    def answer(response: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": api_version,
            "kind": "AdmissionReview",
            "response": {"uid": uid, **response},
        }

    kind = (request.get("kind") or {}).get("kind")
    if request.get("operation") != "CREATE" or kind != "Pod":
        return answer({"allowed": True})
    pod = request.get("object") or {}
    namespace = request.get("namespace") or (pod.get("metadata") or {}).get(
        "namespace", ""
    )
    name = (pod.get("metadata") or {}).get("name") or (
        (pod.get("metadata") or {}).get("generateName", "") + "<generated>"
    )
    try:
        ops = mutation(pod, namespace, source)
    except (InjectError, KubeError) as exc:
        log.warning("pod %s/%s denied: %s", namespace, name, exc)
        return answer(
            {
                "allowed": False,
                "status": {"code": 403, "reason": "Forbidden", "message": str(exc)},
            }
        )
    if not ops:
        return answer({"allowed": True})
    log.info(
        "pod %s/%s: %s",
        namespace,
        name,
        "; ".join(f"{o['path']}={o['value']}" for o in ops),
    )
    patch = base64.b64encode(json.dumps(ops).encode()).decode()
    return answer({"allowed": True, "patchType": "JSONPatch", "patch": patch})


def mutation(
    pod: Mapping[str, Any], namespace: str, source: NetworkSource
) -> list[dict[str, Any]]:
    """The JSON patch for ``pod``: empty when neither it nor its namespace asks."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    request = inject_request(annotations, None)
    if request is None and namespace:
        request = inject_request(None, source.namespace_annotations(namespace))
    if request is None:
        return []
    listed = source.labelled_networks(request.key, request.group)
    chosen = select(request, [Network.from_nad(obj) for obj in listed])
    return patch_for(pod, chosen)


class _Handler(BaseHTTPRequestHandler):
    server_version = "railyard-webhook"
    # keep-alive: the API server reuses its connection instead of a TLS
    # handshake per pod (every response carries Content-Length)
    protocol_version = "HTTP/1.1"
    # headers and body leave in two writes; with Nagle on, the second waits
    # for the client's delayed ACK (~40 ms per review)
    disable_nagle_algorithm = True
    source: NetworkSource  # set on the subclass made by make_server

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == HEALTH_PATH:
            self._send(HTTPStatus.OK, b"ok\n", "text/plain")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        if self.path.split("?", 1)[0] != MUTATE_PATH:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            self._send(HTTPStatus.BAD_REQUEST, b"bad Content-Length\n", "text/plain")
            return
        try:
            body = json.loads(self.rfile.read(length))
            if not isinstance(body, dict) or not isinstance(body.get("request"), dict):
                raise ValueError("not an AdmissionReview")
        except ValueError as exc:
            self._send(HTTPStatus.BAD_REQUEST, f"{exc}\n".encode(), "text/plain")
            return
        answer = review(body, self.source)
        self._send(HTTPStatus.OK, json.dumps(answer).encode(), "application/json")

    def _send(self, status: HTTPStatus, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("%s %s", self.address_string(), format % args)


def make_server(
    source: NetworkSource, host: str, port: int, cert: Path, key: Path
) -> ThreadingHTTPServer:
    """A bound HTTPS server (port 0 picks a free one; see ``server_address``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    handler = type("Handler", (_Handler,), {"source": source})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


def serve(source: NetworkSource, host: str, port: int, cert: Path, key: Path) -> None:
    """Serve until SIGTERM/SIGINT."""
    import signal
    import threading

    server = make_server(source, host, port, cert, key)

    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    log.info("serving %s on https://%s:%d", MUTATE_PATH, host, server.server_address[1])
    try:
        server.serve_forever()
    finally:
        server.server_close()
