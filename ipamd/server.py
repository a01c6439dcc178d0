# SPDX-License-Identifier: Apache-2.0
"""Wire settings -> store -> engine -> servicer -> gRPC server, and serve.

Server-side (imports grpc; sqlalchemy only through ``SqlStore``). Transport
rules: a unix socket by default, created inside a 0700 directory and made
0600 (the umask is tightened around bind so the socket is never briefly
world-accessible); TCP only with TLS, and mutual TLS when a client CA is
given (clusters where nodes reach one central ipamd).

Replicas: any number of daemons may be started on one database; the engine
makes exactly one of them active (see ``ipamd.engine``). The optional health
endpoint lets Kubernetes route the Service to that one only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import stat
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from ipamd.engine import Engine
from ipamd.http_endpoint import HttpEndpoint, parse_listen
from ipamd.servicer import IpamServicer, add_to_server
from ipamd.settings import Settings
from ipamd.store import Store, StoreError

if TYPE_CHECKING:
    from ipamd.metrics import IpamdMetrics, MetricsEndpoint

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """Settings that cannot be served (e.g. TCP without TLS)."""


def unix_path(listen: str) -> Path | None:
    """The socket path of a unix listen address, None for TCP."""
    if listen.startswith("unix://"):
        return Path(listen.removeprefix("unix://"))
    if listen.startswith("unix:"):
        return Path(listen.removeprefix("unix:"))
    if listen.startswith("/") or listen.startswith("."):
        return Path(listen)
    return None


def _prepare_socket_dir(path: Path) -> None:
    parent = path.parent
    if not parent.exists():
        parent.mkdir(mode=0o700, parents=True)
        os.chmod(parent, 0o700)  # mkdir's mode is filtered by the umask
    elif parent.stat().st_mode & 0o077:
        # An existing directory may be shared (a lab dir, /tmp): not ours to
        # chmod. The socket itself is still 0600.
        log.warning(
            "socket directory %s is accessible to group/others (mode %o); "
            "a dedicated 0700 directory is safer",
            parent,
            stat.S_IMODE(parent.stat().st_mode),
        )
    if path.exists() or path.is_symlink():
        # A socket left by a killed daemon; refuse to remove anything else.
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise ConfigError(f"{path} exists and is not a socket")
        path.unlink()


def _credentials(settings: Settings) -> grpc.ServerCredentials:
    if not (settings.tls_cert and settings.tls_key):
        raise ConfigError(
            "TCP listen address needs --tls-cert and --tls-key (plain TCP would "
            "let anyone on the network allocate and release addresses)"
        )
    key = settings.tls_key.read_bytes()
    cert = settings.tls_cert.read_bytes()
    ca = settings.client_ca.read_bytes() if settings.client_ca else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


class _LoopThread:
    """An asyncio loop on its own thread: the grpc.aio server lives there, so
    ``build`` and ``Daemon.stop`` stay plain functions for the CLI and tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="ipamd-grpc", daemon=True
        )
        self.thread.start()

    def run(self, coro: Any, timeout: float | None = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class _HealthServer:
    """GET /readyz: 200 on the active replica, 503 on a standby; /livez: 200
    while the writer runs. Plain HTTP (an httpGet probe needs no TLS)."""

    def __init__(self, listen: str, engine: Engine) -> None:
        host, port = parse_listen(listen, default_host="0.0.0.0")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path == "/readyz":
                    ok = engine.active
                    body = engine.role.value if ok else str(engine.unavailable())
                elif self.path == "/livez":
                    ok = engine.alive
                    body = "alive" if ok else "writer stopped"
                else:
                    self.send_error(404)
                    return
                data = (body + "\n").encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # probes every few seconds would flood the log

        self._endpoint = HttpEndpoint(host, port, Handler, "ipamd-health")
        self.address = self._endpoint.address

    def close(self) -> None:
        self._endpoint.stop()


@dataclass
class Daemon:
    """A running ipamd: its gRPC server, event loop and engine."""

    server: grpc.aio.Server
    engine: Engine
    address: str  # what clients dial: "unix:///path" or "host:port"
    socket: Path | None = None
    _loop: _LoopThread | None = field(default=None, repr=False)
    health: _HealthServer | None = field(default=None, repr=False)
    metrics: MetricsEndpoint | None = field(default=None, repr=False)

    def stop(self, grace: float | None = 5.0) -> None:
        """Stop accepting, let in-flight RPCs finish within ``grace``, close."""
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None
        if self._loop is not None:
            self._loop.run(self.server.stop(grace), timeout=None)
            self._loop.close()
            self._loop = None
        if self.health is not None:
            self.health.close()
        self.engine.stop()
        if self.socket is not None and self.socket.exists():
            self.socket.unlink()


def open_store(db_url: str) -> Store:
    if db_url in ("memory", "memory://"):
        from ipamd.store.memory import MemoryStore

        return MemoryStore()
    from ipamd.store.sql import SqlStore

    if db_url.startswith("sqlite:///") and db_url not in ("sqlite:///:memory:",):
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(
            parents=True, exist_ok=True
        )
    try:
        return SqlStore(db_url)
    except StoreError as exc:
        raise ConfigError(str(exc)) from None


def default_holder() -> str:
    """This replica's name in the lease: the host (the pod name in
    Kubernetes) and the process."""
    return f"{socket.gethostname()}/{os.getpid()}"


def build(settings: Settings, store: Store | None = None) -> Daemon:
    """Start an ipamd for ``settings`` (tests pass their own ``store``)."""
    store = store if store is not None else open_store(settings.db_url)
    metrics = None
    if settings.metrics_listen:
        from ipamd.metrics import IpamdMetrics

        metrics = IpamdMetrics()
    engine = Engine(
        store,
        holder=settings.holder or default_holder(),
        max_batch=settings.max_batch,
        lease_ttl=settings.lease_ttl,
        on_batch=metrics.batch if metrics is not None else None,
    )
    loop = _LoopThread()
    path = unix_path(settings.listen)

    async def start() -> tuple[grpc.aio.Server, str]:
        server = grpc.aio.server(
            options=[("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
        )
        add_to_server(
            IpamServicer(
                engine,
                metrics,
                node_name=settings.node_name,
                node_reconcile_grace=settings.node_reconcile_grace,
            ),
            server,
        )
        try:
            if path is not None:
                _prepare_socket_dir(path)
                address = f"unix://{path}"
                old = os.umask(0o177)
                try:
                    server.add_insecure_port(address)
                    await server.start()
                finally:
                    os.umask(old)
                os.chmod(path, 0o600)
            else:
                creds = _credentials(settings)
                port = server.add_secure_port(settings.listen, creds)
                address = f"{settings.listen.rpartition(':')[0]}:{port}"
                await server.start()
        except BaseException:
            await server.stop(None)
            raise
        return server, address

    health = None
    try:
        server, address = loop.run(start())
        if settings.health_listen:
            health = _HealthServer(settings.health_listen, engine)
    except BaseException:
        loop.close()
        engine.stop()
        raise
    endpoint = None
    if metrics is not None:
        try:
            endpoint = _serve_metrics(settings.metrics_listen, metrics, engine, loop)
        except BaseException:
            loop.run(server.stop(None))
            loop.close()
            if health is not None:
                health.close()
            engine.stop()
            raise
    log.info(
        "ipamd %s serving on %s (%s) as the %s replica, database %s%s",
        engine.holder,
        address,
        "mTLS" if settings.client_ca else ("TLS" if path is None else "unix socket"),
        engine.role.value,
        engine.database,
        f", health on http://{health.address}" if health else "",
    )
    return Daemon(server, engine, address, path, loop, health, endpoint)


def _serve_metrics(
    listen: str, metrics: IpamdMetrics, engine: Engine, loop: _LoopThread
) -> MetricsEndpoint:
    """Pool gauges read on the writer (like any RPC) through the server's loop."""
    from ipamd.metrics import MetricsEndpoint
    from ipamd.pool_admin import list_usage

    def job(st: Any) -> tuple[Any, tuple[()]]:
        return [(u.pool.name, u.pool.version, u) for u in list_usage(st)], ()

    async def read() -> Any:
        return await engine.submit_async(job)

    metrics.watch_pools(lambda: loop.run(read(), timeout=5.0))
    try:
        return MetricsEndpoint(listen, metrics.registry)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT; in-flight RPCs get ``settings.grace`` seconds."""
    import signal

    daemon = build(settings)
    done = threading.Event()

    def _stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    done.wait()
    daemon.stop(settings.grace)
