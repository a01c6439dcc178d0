# SPDX-License-Identifier: Apache-2.0
"""IpamdClient: the plugins' IpamClient Protocol over ``ipamd.client``.

A thin adapter: the transport (endpoints, channels, deadline, failover across
ipamd replicas) is ``ipamd.client``; this module converts the plugin's records
to the API messages and the outcome to CNI error codes. It imports grpc (via
``ipamd.client``) at module top; plugins import *this module* lazily (inside
their deps factory), so VERSION and config errors never pay grpc's ~120 ms
import.

Error mapping (CNI SPEC "Error" codes): no daemon answering within the
deadline (down, restarting, only standbys) is transient, 11 "try again later",
for allocate/release/check/gc, and 50 for STATUS; a refusal (exhausted pool,
unknown pool, bad request) is 101 with ipamd's reason as the message.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cni import timings
from cni.errors import (
    INVALID_CONFIG,
    IPAM_ERROR,
    STATUS_UNAVAILABLE,
    TRY_AGAIN_LATER,
    CniError,
)
from cni.ipam import (
    Attachment,
    Budget,
    IpamAddress,
    IpamClient,
    IpamError,
    IpamRequest,
    IpamResult,
    IpamRoute,
    time_left,
)
from ipamd import client as transport
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION

DEFAULT_TIMEOUT = transport.DEFAULT_TIMEOUT


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
        match_master_subnet=req.match_master_subnet,
        master=req.master,
        master_addresses=list(req.master_addresses),
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


def _error(op: str, err: transport.IpamdCallError, transient: int) -> IpamError:
    if err.unreachable:
        return IpamError(
            transient,
            f"ipamd is not reachable ({op})",
            err.describe(),
            unchanged=err.changed_nothing,
        )
    where = f"ipamd {op} at {err.target}: {err.code.name}"
    return IpamError(IPAM_ERROR, err.details or f"ipamd {op} failed", where)


class IpamdClient:
    """ipamd over gRPC; see the module docstring for the error mapping."""

    #: ipamd allocates from its pools; it never looks at the interface.
    uses_interface = False

    def __init__(
        self,
        target: str | Sequence[str] | transport.IpamdClient,
        timeout: float = DEFAULT_TIMEOUT,
        tls_ca: Path | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        budget: Budget | None = None,
    ) -> None:
        """``target``: endpoint(s) to dial, or a transport client to adapt;
        ``budget``: bounds every call by the time the command has left."""
        self.ipamd = (
            target
            if isinstance(target, transport.IpamdClient)
            else transport.IpamdClient(target, timeout, tls_ca, tls_cert, tls_key)
        )
        self._configured_timeout = self.ipamd.timeout
        self._budget = budget

    @classmethod
    def from_netconf(
        cls,
        netconf: Mapping[str, Any],
        env: Mapping[str, str],
        budget: Budget | None = None,
    ) -> IpamdClient:
        """The client for a plugin config (see ``ipamd.client.IpamdClient.
        from_config`` for ``ipam.endpoints``/``socket``/``timeout``/``tls_*``)."""
        ipam = netconf.get("ipam")
        try:
            client = transport.IpamdClient.from_config(
                ipam if isinstance(ipam, Mapping) else {}, env
            )
        except ValueError as exc:
            raise CniError(INVALID_CONFIG, "invalid ipam config", str(exc)) from None
        return cls(client, budget=budget)

    def _bound(self, op: str) -> None:
        """Fit the next call into the command's deadline.

        The failover loop retries refusals until its timeout; past the
        command's deadline that would end in the deadline's kill (105) with
        the rollback not run. Stopping early answers 11, and the runtime
        retries the ADD later.
        """
        left = time_left(self._budget, f"ipamd {op}", f"{self.ipamd.target} not tried")
        self.ipamd.timeout = (
            self._configured_timeout
            if left is None
            else min(self._configured_timeout, left)
        )

    @property
    def target(self) -> str:
        return self.ipamd.target

    @property
    def timeout(self) -> float:
        return self.ipamd.timeout

    @property
    def stub(self) -> Any:
        return self.ipamd.stub

    @timings.timed(timings.IPAM)
    def allocate(self, req: IpamRequest) -> IpamResult:
        self._bound("allocate")
        try:
            reply = self.ipamd.allocate(request_to_proto(req))
        except transport.IpamdCallError as err:
            raise _error("allocate", err, TRY_AGAIN_LATER) from None
        return reply_to_result(reply)

    @timings.timed(timings.IPAM)
    def release(self, network: str, container_id: str, ifname: str) -> None:
        self._bound("release")
        try:
            self.ipamd.release(network, container_id, ifname)
        except transport.IpamdCallError as err:
            raise _error("release", err, TRY_AGAIN_LATER) from None

    @timings.timed(timings.IPAM)
    def check(self, network: str, container_id: str, ifname: str) -> IpamResult:
        self._bound("check")
        try:
            reply = self.ipamd.check(network, container_id, ifname)
        except transport.IpamdCallError as err:
            raise _error("check", err, TRY_AGAIN_LATER) from None
        return reply_to_result(reply)

    def gc(self, network: str, valid: Sequence[Attachment]) -> int:
        self._bound("gc")
        try:
            return self.ipamd.gc(network, [(a.container_id, a.ifname) for a in valid])
        except transport.IpamdCallError as err:
            raise _error("gc", err, TRY_AGAIN_LATER) from None

    def status(self) -> None:
        try:
            self._bound("status")
            reply = self.ipamd.status()
        except IpamError as err:
            raise IpamError(
                STATUS_UNAVAILABLE, "ipamd is not available", err.msg
            ) from None
        except transport.IpamdCallError as err:
            raise IpamError(
                STATUS_UNAVAILABLE, "ipamd is not available", err.describe()
            ) from None
        if not reply.ready:
            raise IpamError(
                STATUS_UNAVAILABLE, "ipamd is not ready", reply.message or "not ready"
            )

    def close(self) -> None:
        self.ipamd.close()

    def __enter__(self) -> IpamdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:
    # The Protocol conformance check the style guide asks for (mypy verifies it).
    _conforms: type[IpamClient] = IpamdClient
