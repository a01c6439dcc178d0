# SPDX-License-Identifier: Apache-2.0
"""IpamdClient: the IpamClient Protocol over gRPC to ipamd.

The one module of ``cni`` that imports grpc and the generated stubs, at module
top; plugins import *this module* lazily (inside their deps factory), so
VERSION and config errors never pay grpc's ~120 ms import. Also used by the
``ipamd`` admin CLI to reach the daemon (``open_channel``).

Error mapping (CNI SPEC "Error" codes): a daemon that is down or too slow is
transient, 11 "try again later", for allocate/release/check/gc, and 50 for
STATUS; a refusal (exhausted pool, unknown pool, bad request) is 101 with
ipamd's reason as the message.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from cni.errors import IPAM_ERROR, STATUS_UNAVAILABLE, TRY_AGAIN_LATER
from cni.ipam import (
    Attachment,
    IpamAddress,
    IpamClient,
    IpamError,
    IpamRequest,
    IpamResult,
    IpamRoute,
)
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1 import ipam_pb2_grpc as pb_grpc
from ipamd.api.v1.version import API_VERSION

DEFAULT_TIMEOUT = 30.0
DEFAULT_SOCKET = "/run/railyard/ipamd.sock"
SOCKET_ENV = "RAILYARD_IPAMD_SOCKET"
TLS_ENV_PREFIX = "RAILYARD_IPAMD_TLS_"
_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def channel_target(target: str) -> str:
    """gRPC target for a socket path, ``unix://`` URL or ``host:port``."""
    if target.startswith("unix:"):
        return target
    if target.startswith("/") or target.startswith("."):
        return f"unix://{Path(target).absolute()}"
    return target


def is_unix(target: str) -> bool:
    return channel_target(target).startswith("unix:")


def open_channel(
    target: str,
    tls_ca: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> grpc.Channel:
    """A channel to ipamd: plain on a unix socket, TLS (mTLS with a cert) on TCP."""
    address = channel_target(target)
    if address.startswith("unix:"):
        return grpc.insecure_channel(address)
    creds = grpc.ssl_channel_credentials(
        root_certificates=tls_ca.read_bytes() if tls_ca else None,
        private_key=tls_key.read_bytes() if tls_key else None,
        certificate_chain=tls_cert.read_bytes() if tls_cert else None,
    )
    return grpc.secure_channel(address, creds)


def request_to_proto(req: IpamRequest) -> pb.AllocateRequest:
    """The plugin's IpamRequest as ipamd's AllocateRequest."""
    return pb.AllocateRequest(
        client_version=API_VERSION,
        network=req.network,
        container_id=req.container_id,
        ifname=req.ifname,
        netns=req.netns,
        pod_namespace=req.pod_namespace,
        pod_name=req.pod_name,
        pod_uid=req.pod_uid,
        node=req.node_name,
        ipv4_pools=list(req.ipv4_pools),
        ipv6_pools=list(req.ipv6_pools),
        requested_ips=list(req.requested_ips),
        sticky=req.sticky,
    )


def reply_to_result(reply: pb.AllocateReply) -> IpamResult:
    """ipamd's reply as an IpamResult: CIDR addresses, gateways, pool routes."""
    result = IpamResult()
    for ip in reply.ips:
        version = ip.version or ipaddress.ip_interface(ip.address).version
        result.ips.append(
            IpamAddress(
                address=ip.address,
                gateway=ip.gateway or None,
                pool=ip.pool,
                version=version,
            )
        )
    for route in reply.routes:
        result.routes.append(IpamRoute(dst=route.dst, gw=route.gw or None))
    return result


class IpamdClient:
    """ipamd over gRPC; see the module docstring for the error mapping."""

    def __init__(
        self,
        target: str,
        timeout: float = DEFAULT_TIMEOUT,
        tls_ca: Path | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
    ) -> None:
        self.target = target
        self.timeout = timeout
        self._channel = open_channel(target, tls_ca, tls_cert, tls_key)
        # The generated gRPC module carries no annotations.
        self.stub = pb_grpc.IpamStub(self._channel)  # type: ignore[no-untyped-call]

    @classmethod
    def from_netconf(
        cls, netconf: Mapping[str, Any], env: Mapping[str, str]
    ) -> IpamdClient:
        """The client for a plugin config: ``ipam.socket`` > env
        RAILYARD_IPAMD_SOCKET > /run/railyard/ipamd.sock; ``ipam.timeout``
        (seconds) bounds each call.

        A central ipamd is reached over TCP with TLS: ``socket`` is then
        ``host:port`` and ``tls_ca`` (plus ``tls_cert``/``tls_key`` for mutual
        TLS) name PEM files on the node; each falls back to the env variable
        RAILYARD_IPAMD_TLS_CA / _CERT / _KEY so one node-wide setting serves
        every network.
        """
        ipam = netconf.get("ipam")
        ipam = ipam if isinstance(ipam, Mapping) else {}
        target = ipam.get("socket") or env.get(SOCKET_ENV) or DEFAULT_SOCKET
        timeout = ipam.get("timeout", DEFAULT_TIMEOUT)
        if not isinstance(timeout, int | float) or timeout <= 0:
            timeout = DEFAULT_TIMEOUT

        def pem(key: str) -> Path | None:
            raw = ipam.get(f"tls_{key}") or env.get(f"{TLS_ENV_PREFIX}{key.upper()}")
            return Path(str(raw)) if raw else None

        return cls(
            str(target),
            timeout=float(timeout),
            tls_ca=pem("ca"),
            tls_cert=pem("cert"),
            tls_key=pem("key"),
        )

    def _error(self, op: str, err: grpc.RpcError, transient: int) -> IpamError:
        code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
        reason = err.details() if hasattr(err, "details") else str(err)
        where = f"ipamd {op} at {self.target}: {code.name}"
        if code in _TRANSIENT:
            return IpamError(
                transient, f"ipamd is not reachable ({op})", f"{where}: {reason}"
            )
        return IpamError(IPAM_ERROR, reason or f"ipamd {op} failed", where)

    def allocate(self, req: IpamRequest) -> IpamResult:
        try:
            reply = self.stub.Allocate(request_to_proto(req), timeout=self.timeout)
        except grpc.RpcError as err:
            raise self._error("allocate", err, TRY_AGAIN_LATER) from None
        return reply_to_result(reply)

    def release(self, network: str, container_id: str, ifname: str) -> None:
        msg = pb.ReleaseRequest(
            client_version=API_VERSION,
            network=network,
            container_id=container_id,
            ifname=ifname,
        )
        try:
            self.stub.Release(msg, timeout=self.timeout)
        except grpc.RpcError as err:
            raise self._error("release", err, TRY_AGAIN_LATER) from None

    def check(self, network: str, container_id: str, ifname: str) -> IpamResult:
        msg = pb.CheckRequest(
            client_version=API_VERSION,
            network=network,
            container_id=container_id,
            ifname=ifname,
        )
        try:
            reply = self.stub.Check(msg, timeout=self.timeout)
        except grpc.RpcError as err:
            raise self._error("check", err, TRY_AGAIN_LATER) from None
        return reply_to_result(reply)

    def gc(self, network: str, valid: Sequence[Attachment]) -> int:
        msg = pb.GarbageCollectRequest(
            client_version=API_VERSION,
            network=network,
            valid=[
                pb.Attachment(container_id=a.container_id, ifname=a.ifname)
                for a in valid
            ],
        )
        try:
            reply = self.stub.GarbageCollect(msg, timeout=self.timeout)
        except grpc.RpcError as err:
            raise self._error("gc", err, TRY_AGAIN_LATER) from None
        return int(reply.released_attachments)

    def status(self) -> None:
        try:
            reply = self.stub.Status(
                pb.StatusRequest(client_version=API_VERSION), timeout=self.timeout
            )
        except grpc.RpcError as err:
            code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
            raise IpamError(
                STATUS_UNAVAILABLE,
                "ipamd is not available",
                f"ipamd at {self.target}: {code.name}: "
                + (err.details() if hasattr(err, "details") else str(err)),
            ) from None
        if not reply.ready:
            raise IpamError(
                STATUS_UNAVAILABLE, "ipamd is not ready", reply.message or "not ready"
            )

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> IpamdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:
    # The Protocol conformance check the style guide asks for (mypy verifies it).
    _conforms: type[IpamClient] = IpamdClient
