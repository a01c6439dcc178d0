# SPDX-License-Identifier: Apache-2.0
"""The gRPC client of ipamd: endpoints, channels, one deadline, failover.

Used by the ``ipamd`` admin CLI and, through the thin adapter
``cni.ipam.grpc_client``, by the plugins. Imports grpc, the generated API
package and the standard library only, so both sides can depend on it without
depending on each other.

Several endpoints (replicas of ipamd on one database, of which one is active)
are tried in turn: a call that ends UNAVAILABLE (a standby's refusal, a
connection refused, a socket that does not exist) moves on to the next
endpoint until the call's deadline. UNAVAILABLE means the request changed
nothing on that daemon, so resending it cannot duplicate anything; a call that
timed out on one endpoint is only resent when the caller says the method is
idempotent (``Allocate`` is keyed by (container ID, ifname) in ipamd, and a
retry returns the same addresses).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1 import ipam_pb2_grpc as pb_grpc
from ipamd.api.v1.version import API_VERSION

DEFAULT_SOCKET = "/run/railyard/ipamd.sock"
#: One endpoint, or several separated by commas.
SOCKET_ENV = "RAILYARD_IPAMD_SOCKET"
TLS_ENV_PREFIX = "RAILYARD_IPAMD_TLS_"
DEFAULT_TIMEOUT = 30.0
#: A day: longer than any runtime waits for a plugin.
MAX_TIMEOUT = 86400.0
#: The most one attempt may take when another endpoint could answer instead:
#: a hung active must not eat the whole deadline while a standby takes over.
ATTEMPT_TIMEOUT = 5.0
#: The largest request ipamd accepts (gRPC's default receive limit).
MAX_MESSAGE_BYTES = 4 * 1024 * 1024

_RETRY_ALWAYS = frozenset({grpc.StatusCode.UNAVAILABLE})
_RETRY_IF_IDEMPOTENT = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED})
# gRPC waits 1 s, then 1.6x longer each time, before redialling an endpoint
# that refused; a replica taking over must be found within a second or so.
_RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
_BACKOFF_FIRST = 0.05
_BACKOFF_MAX = 0.5


def channel_target(target: str) -> str:
    """gRPC target for a socket path, ``unix://`` URL or ``host:port``."""
    if target.startswith("unix:"):
        return target
    if target.startswith("/") or target.startswith("."):
        return f"unix://{Path(target).absolute()}"
    return target


def is_unix(target: str) -> bool:
    return channel_target(target).startswith("unix:")


def check_unix_target(target: str) -> None:
    """ValueError when a unix endpoint names something that is not a socket.

    A missing path is fine (ipamd may be starting: it is retried until the
    deadline); a directory, a regular file or a FIFO never becomes ipamd, and
    gRPC would only report it as "unavailable" until the deadline.
    """
    address = channel_target(target)
    if not address.startswith("unix:"):
        return
    path = address[len("unix://") :] if address.startswith("unix://") else address[5:]
    if "\x00" in path:
        raise ValueError(f"ipamd socket path holds a NUL byte: {path[:80]!r}")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        raise ValueError(f"ipamd socket {path[:200]!r}: {exc}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise ValueError(f"ipamd socket {path[:200]!r} is not a socket")


def configured_endpoints(
    ipam: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[str, ...]:
    """The endpoints an ``ipam`` section names, in the order of
    ``IpamdClient.from_config``; nothing is opened or looked at."""
    return (
        parse_endpoints(ipam.get("endpoints"))
        or parse_endpoints(ipam.get("socket"))
        or parse_endpoints(env.get(SOCKET_ENV))
        or (DEFAULT_SOCKET,)
    )


def parse_endpoints(raw: Any) -> tuple[str, ...]:
    """Endpoints from a comma-separated string or a list of strings, blanks
    dropped; ValueError for anything else."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, list | tuple) and all(isinstance(x, str) for x in raw):
        items = list(raw)
    else:
        raise ValueError(
            f"ipamd endpoints must be a list of strings or one comma-separated "
            f"string, got {type(raw).__name__}"
        )
    return tuple(item.strip() for item in items if item.strip())


ChannelKey = tuple[str, Path | None, Path | None, Path | None]

#: Channels opened before the call that will use them (by a node agent's
#: spare worker, while it waits for a request), each handed out once.
_OPENED_AHEAD: dict[ChannelKey, grpc.Channel] = {}
#: Whether a closed client leaves its channels there for the next one.
_KEEP_CHANNELS = [False]


def keep_channels() -> None:
    """From now on a closed ``IpamdClient`` of this process leaves its channels
    open for the next client of the same endpoints instead of closing them.

    For a node agent's worker, which serves one request after another: a new
    channel per request costs gRPC's dial and connection again (~5 ms of
    CPU), and the descriptors of a closed one go away only later, on gRPC's
    own threads.
    """
    _KEEP_CHANNELS[0] = True


def _channel_key(
    target: str, tls_ca: Path | None, tls_cert: Path | None, tls_key: Path | None
) -> ChannelKey:
    return (channel_target(target), tls_ca, tls_cert, tls_key)


def open_ahead(
    targets: Sequence[str],
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    wait: float = 1.0,
) -> int:
    """Open the channels the next client of ``targets`` (with the same TLS
    files) will use, connect them with one Status call each, waiting up to
    ``wait`` seconds in all; how many answered.

    Starting gRPC's core and connecting cost a fresh process ~5-10 ms of its
    first call; a process that knows it will call ipamd soon pays that before
    the request arrives. A call, not ``grpc.channel_ready_future``: that one
    leaves a thread polling the channel, which fails noisily when the
    channel is closed soon after. A channel that did not connect (a replica
    down) is kept all the same: gRPC dials again at the first real call.
    """
    calls = []
    for target in targets:
        key = _channel_key(target, tls_ca, tls_cert, tls_key)
        channel = _OPENED_AHEAD.get(key)
        if channel is None:
            channel = _OPENED_AHEAD[key] = _dial(*key)
        stub = pb_grpc.IpamStub(channel)  # type: ignore[no-untyped-call]
        msg = pb.StatusRequest(client_version=API_VERSION)
        calls.append(stub.Status.future(msg, timeout=wait, wait_for_ready=True))
    answered = 0
    for call in calls:
        try:
            call.result()
            answered += 1
        except grpc.RpcError:
            pass
    return answered


def open_channel(
    target: str,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> grpc.Channel:
    """A channel to ipamd: plain on a unix socket, TLS (mTLS with a cert) on TCP.

    The channel ``open_ahead`` opened for the same arguments, if any."""
    key = _channel_key(target, tls_ca, tls_cert, tls_key)
    channel = _OPENED_AHEAD.pop(key, None)
    return channel if channel is not None else _dial(*key)


def _dial(
    address: str, tls_ca: Path | None, tls_cert: Path | None, tls_key: Path | None
) -> grpc.Channel:
    if address.startswith("unix:"):
        return grpc.insecure_channel(address, options=_RECONNECT)
    creds = grpc.ssl_channel_credentials(
        root_certificates=tls_ca.read_bytes() if tls_ca else None,
        private_key=tls_key.read_bytes() if tls_key else None,
        certificate_chain=tls_cert.read_bytes() if tls_cert else None,
    )
    return grpc.secure_channel(address, creds, options=_RECONNECT)


@dataclass(frozen=True, slots=True)
class Attempt:
    target: str
    code: grpc.StatusCode
    details: str


class IpamdCallError(Exception):
    """A call that ended in an error on every endpoint it was tried on.

    ``code`` and ``details`` are the last attempt's (the one that decided);
    ``attempts`` lists them all, for logs.
    """

    def __init__(
        self, method: str, attempts: Sequence[Attempt], gave_up_after: float = 0.0
    ) -> None:
        last = attempts[-1]
        super().__init__(f"ipamd {method} at {last.target}: {last.code.name}")
        self.method = method
        self.gave_up_after = gave_up_after
        self.code = last.code
        self.details = last.details
        self.target = last.target
        self.attempts = tuple(attempts)

    @property
    def unreachable(self) -> bool:
        """No daemon answered in time (none up, or only standbys)."""
        return self.code in _RETRY_ALWAYS | _RETRY_IF_IDEMPOTENT

    @property
    def changed_nothing(self) -> bool:
        """Every attempt was refused before a daemon took the request (or none
        was made): nothing can have changed, and nothing needs undoing."""
        return all(a.code in _RETRY_ALWAYS for a in self.attempts)

    def describe(self) -> str:
        """Every attempt in one line: ``target CODE: details; ...``."""
        seen: dict[tuple[str, str, str], int] = {}
        for a in self.attempts:
            key = (a.target, a.code.name, a.details)
            seen[key] = seen.get(key, 0) + 1
        text = "; ".join(
            f"{t} {c}: {d}" + (f" (x{n})" if n > 1 else "")
            for (t, c, d), n in seen.items()
        )
        if self.gave_up_after:
            text += f"; gave up after {self.gave_up_after:.1f}s"
        return text


def _status(err: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    return code, details or ""


class IpamdClient:
    """ipamd at one or more endpoints; every call has one overall deadline.

    ``timeout`` bounds a whole call, retries included. The endpoint that last
    answered is tried first on the next call, so a client keeps talking to the
    active replica once it found it.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        timeout: float = DEFAULT_TIMEOUT,
        tls_ca: Path | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        *,
        attempt_timeout: float = ATTEMPT_TIMEOUT,
        retry_window: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        targets = parse_endpoints(endpoints)
        if not targets:
            raise ValueError("no ipamd endpoint given")
        self.targets = targets
        self.timeout = timeout
        self.attempt_timeout = attempt_timeout
        # How long refusals are retried; None: until the deadline. A person at
        # the CLI wants a quick answer, a plugin waits for a failover.
        self.retry_window = retry_window
        self.tls = (tls_ca, tls_cert, tls_key)
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, Any] = {}
        self._preferred = 0
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def from_config(
        cls, ipam: Mapping[str, Any], env: Mapping[str, str]
    ) -> IpamdClient:
        """The client for an ``ipam`` config section.

        Endpoints: ``ipam.endpoints`` (a list, or a comma-separated string) >
        ``ipam.socket`` (one, or comma-separated) > env RAILYARD_IPAMD_SOCKET
        (idem) > /run/railyard/ipamd.sock. ``ipam.timeout`` (seconds) bounds
        each call, failover included.

        A central ipamd is reached over TCP with TLS: an endpoint is then
        ``host:port`` and ``tls_ca`` (plus ``tls_cert``/``tls_key`` for mutual
        TLS) name PEM files on the node; each falls back to the env variable
        RAILYARD_IPAMD_TLS_CA / _CERT / _KEY so one node-wide setting serves
        every network.
        """
        targets = configured_endpoints(ipam, env)
        timeout = ipam.get("timeout")
        if timeout is None:
            timeout = DEFAULT_TIMEOUT
        elif (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            # NaN compares false both ways, so it fails this range too.
            or not 0 < timeout <= MAX_TIMEOUT
        ):
            shown = (
                repr(timeout)
                if not isinstance(timeout, int)
                else (
                    f"a {timeout.bit_length()}-bit number"
                    if timeout.bit_length() > 64
                    else str(timeout)
                )
            )
            raise ValueError(
                f"ipam timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}],"
                f" got {shown[:80]}"
            )
        for target in targets:
            check_unix_target(target)

        def pem(key: str) -> Path | None:
            raw = ipam.get(f"tls_{key}") or env.get(f"{TLS_ENV_PREFIX}{key.upper()}")
            return Path(str(raw)) if raw else None

        return cls(
            targets,
            timeout=float(timeout),
            tls_ca=pem("ca"),
            tls_cert=pem("cert"),
            tls_key=pem("key"),
        )

    @property
    def target(self) -> str:
        """The endpoint tried first (the last one that answered)."""
        return self.targets[self._preferred]

    @property
    def stub(self) -> Any:
        """The generated stub of the preferred endpoint (no failover)."""
        return self._stub(self.target)

    def _stub(self, target: str) -> Any:
        stub = self._stubs.get(target)
        if stub is None:
            channel = open_channel(target, *self.tls)
            self._channels[target] = channel
            # The generated gRPC module carries no annotations.
            stub = pb_grpc.IpamStub(channel)  # type: ignore[no-untyped-call]
            self._stubs[target] = stub
        return stub

    def call(
        self,
        method: str,
        request: Any,
        *,
        idempotent: bool = False,
        good: Callable[[Any], bool] | None = None,
    ) -> Any:
        """``method`` (an RPC name such as ``"Allocate"``) with failover.

        Raises IpamdCallError when the deadline passes with no endpoint
        answering, or at once when a daemon refuses the request itself.
        A reply that ``good`` rejects (a standby's "not ready") sends the call
        on to the next endpoint; when none gives a good one, the first reply is
        returned after one round.
        """
        start = self._clock()
        deadline = start + self.timeout
        if self.retry_window is not None:
            retry_until = start + min(self.retry_window, self.timeout)
        else:
            retry_until = deadline
        retryable = _RETRY_ALWAYS | (_RETRY_IF_IDEMPOTENT if idempotent else set())
        several = len(self.targets) > 1
        attempts: list[Attempt] = []
        backoff = _BACKOFF_FIRST
        fallback: Any = None
        while True:
            for step in range(len(self.targets)):
                index = (self._preferred + step) % len(self.targets)
                target = self.targets[index]
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise self._expired(method, attempts, target, start)
                budget = min(remaining, self.attempt_timeout) if several else remaining
                try:
                    reply = getattr(self._stub(target), method)(request, timeout=budget)
                except grpc.RpcError as err:
                    code, details = _status(err)
                    attempts.append(Attempt(target, code, details))
                    if code not in retryable:
                        raise IpamdCallError(method, attempts) from None
                    continue
                if good is not None and not good(reply):
                    fallback = reply if fallback is None else fallback
                    continue
                self._preferred = index
                return reply
            if fallback is not None:
                return fallback
            now = self._clock()
            remaining = min(deadline, retry_until) - now
            if remaining <= 0:
                raise IpamdCallError(method, attempts, now - start)
            # Every endpoint refused: a standby is taking over, or ipamd is
            # restarting. Wait a little before the next round.
            self._sleep(min(backoff, remaining))
            backoff = min(backoff * 2, _BACKOFF_MAX)

    def _expired(
        self, method: str, attempts: list[Attempt], target: str, start: float
    ) -> IpamdCallError:
        if not attempts:
            attempts.append(
                Attempt(
                    target,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no ipamd answered within {self.timeout:g}s",
                )
            )
        return IpamdCallError(method, attempts, self._clock() - start)

    # -- the RPCs a plugin makes, with the version every request carries ----

    def allocate(self, request: pb.AllocateRequest) -> pb.AllocateReply:
        request.client_version = API_VERSION
        # Idempotent by (container ID, ifname): a resend gets the same leases.
        return self.call("Allocate", request, idempotent=True)  # type: ignore[no-any-return]

    def release(self, network: str, container_id: str, ifname: str) -> int:
        msg = pb.ReleaseRequest(
            client_version=API_VERSION,
            network=network,
            container_id=container_id,
            ifname=ifname,
        )
        reply = self.call("Release", msg, idempotent=True)
        return int(reply.released)

    def check(self, network: str, container_id: str, ifname: str) -> pb.AllocateReply:
        msg = pb.CheckRequest(
            client_version=API_VERSION,
            network=network,
            container_id=container_id,
            ifname=ifname,
        )
        return self.call("Check", msg, idempotent=True)  # type: ignore[no-any-return]

    def gc(self, network: str, valid: Iterable[tuple[str, str]]) -> int:
        msg = pb.GarbageCollectRequest(
            client_version=API_VERSION,
            network=network,
            valid=[pb.Attachment(container_id=c, ifname=i) for c, i in valid],
        )
        reply = self.call("GarbageCollect", msg, idempotent=True)
        return int(reply.released_attachments)

    def reconcile_node(
        self,
        node: str,
        attachments: Iterable[tuple[str, str]],
        networks: Iterable[str],
        dry_run: bool = False,
    ) -> pb.ReconcileNodeReply:
        """The node's account of its attachments (``ReconcileNode``)."""
        msg = pb.ReconcileNodeRequest(
            client_version=API_VERSION,
            node=node,
            attachments=[
                pb.Attachment(container_id=c, ifname=i) for c, i in attachments
            ],
            networks=sorted(set(networks)),
            dry_run=dry_run,
        )
        return self.call("ReconcileNode", msg, idempotent=True)  # type: ignore[no-any-return]

    def status(self) -> pb.StatusReply:
        """The active replica's status, or the first answer when none is ready."""
        msg = pb.StatusRequest(client_version=API_VERSION)
        reply = self.call("Status", msg, idempotent=True, good=lambda r: bool(r.ready))
        return reply  # type: ignore[no-any-return]

    def close(self) -> None:
        for target, channel in self._channels.items():
            key = _channel_key(target, *self.tls)
            if _KEEP_CHANNELS[0] and key not in _OPENED_AHEAD:
                _OPENED_AHEAD[key] = channel
            else:
                channel.close()
        self._channels.clear()
        self._stubs.clear()

    def __enter__(self) -> IpamdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
