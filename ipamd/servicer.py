# SPDX-License-Identifier: Apache-2.0
"""gRPC servicer: proto <-> domain, and domain errors -> status codes. No policy.

Server-side (imports grpc and the generated stubs). Every RPC checks the
client's ``client_version`` first (FAILED_PRECONDITION for another major),
then runs one job on the engine's writer thread and awaits its commit.

The handlers are coroutines of a ``grpc.aio`` server: one event-loop thread
decodes and encodes while the writer thread commits. The thread-pool server
spent about twice the CPU per allocation here, handing every RPC between a
pool thread and the writer under the GIL.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import grpc

from ipamd import pool_admin
from ipamd.allocator import AllocateRequest, AllocState, Lease
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1 import ipam_pb2_grpc as pb_grpc
from ipamd.api.v1.version import API_VERSION, RELEASE, compatible
from ipamd.engine import Engine
from ipamd.errors import (
    Conflict,
    Exhausted,
    InvalidRequest,
    IpamdError,
    NotFound,
    PoolError,
    Unavailable,
)
from ipamd.manifest import parse_manifest
from ipamd.node_identity import proven_node
from ipamd.pool_admin import PoolUsage
from ipamd.pools import (
    Pool,
    ReservedIP,
    brief,
    pool_from_spec,
    reserved_from_spec,
    shown,
)

if TYPE_CHECKING:
    from ipamd.metrics import IpamdMetrics

log = logging.getLogger(__name__)

_CODES: list[tuple[type[Exception], grpc.StatusCode]] = [
    (PoolError, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (Exhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Conflict, grpc.StatusCode.FAILED_PRECONDITION),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class MalformedRequest:
    """What a request that does not decode becomes, so the handler refuses it
    with INVALID_ARGUMENT (gRPC itself would log a traceback and answer
    UNKNOWN)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _tolerant(decode: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode_or_mark(raw: bytes) -> Any:
        try:
            return decode(raw)
        except Exception as exc:  # protobuf's DecodeError, or bad UTF-8
            return MalformedRequest(shown(str(exc), 200)[1:-1])

    return decode_or_mark


class _Registrar:
    """Stands in for the server while the generated code registers handlers."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # rebuilt from the registered handlers below

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, Any]
    ) -> None:
        self.service, self.handlers = service, handlers


def add_to_server(servicer: IpamServicer, server: grpc.aio.Server) -> None:
    """Register ``servicer`` as the generated code does, with request decoding
    that turns a malformed message into MalformedRequest."""
    registrar = _Registrar()
    # The generated gRPC module carries no annotations.
    pb_grpc.add_IpamServicer_to_server(servicer, registrar)  # type: ignore[no-untyped-call]
    handlers = {
        name: handler._replace(
            request_deserializer=_tolerant(handler.request_deserializer)
        )
        for name, handler in registrar.handlers.items()
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(registrar.service, handlers),)
    )
    server.add_registered_method_handlers(registrar.service, handlers)


def _rpc(method: F) -> F:
    """Version check and error mapping around one RPC handler."""

    @functools.wraps(method)
    async def wrapper(
        self: IpamServicer, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Any:
        if isinstance(request, MalformedRequest):
            log.warning(
                "%s refused: malformed request: %s", method.__name__, request.reason
            )
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"malformed {method.__name__} request: {request.reason}",
            )
        if not compatible(request.client_version):
            self._failed(method.__name__, request, grpc.StatusCode.FAILED_PRECONDITION)
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"client API version {request.client_version!r} is not compatible "
                f"with ipamd API {API_VERSION}; upgrade the client",
            )
        try:
            return await method(self, request, context)
        except (IpamdError, PoolError) as exc:
            # Reasons may quote the request; a huge field is not echoed whole.
            reason = brief(str(exc))
            for kind, code in _CODES:
                if isinstance(exc, kind):
                    log.warning("%s refused: %s", method.__name__, reason)
                    self._failed(method.__name__, request, code)
                    await context.abort(code, reason)
            self._failed(method.__name__, request, grpc.StatusCode.UNKNOWN)
            raise
        except TimeoutError:
            self._failed(method.__name__, request, grpc.StatusCode.UNAVAILABLE)
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, "ipamd writer is overloaded"
            )
        except asyncio.CancelledError:
            raise  # the client went away or the server is stopping
        except Exception as exc:
            # A request no check above foresaw. One line at ERROR says which
            # RPC and what; the traceback is for a developer, at DEBUG.
            log.error(
                "%s failed on an unexpected %s: %s",
                method.__name__,
                type(exc).__name__,
                shown(str(exc), 200),
            )
            log.debug("%s traceback", method.__name__, exc_info=True)
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"ipamd could not process this request ({type(exc).__name__}); "
                "the daemon log has the details",
            )

    return cast(F, wrapper)  # same signature as ``method`` (functools.wraps)


def _routes(pool: Pool) -> list[pb.Route]:
    return [pb.Route(dst=str(r.dst), gw=str(r.gw) if r.gw else "") for r in pool.routes]


def lease_reply(leases: Sequence[Lease]) -> pb.AllocateReply:
    reply = pb.AllocateReply()
    seen: set[tuple[str, str]] = set()
    for lease in leases:
        pool = lease.pool
        reply.ips.append(
            pb.IPConfig(
                address=lease.address,
                gateway=str(pool.gateway) if pool.gateway else "",
                pool=pool.name,
                version=pool.version,
            )
        )
        for route in _routes(pool):
            if (route.dst, route.gw) not in seen:
                seen.add((route.dst, route.gw))
                reply.routes.append(route)
    return reply


def pool_to_pb(pool: Pool) -> pb.Pool:
    return pb.Pool(
        name=pool.name,
        ip_version=pool.version,
        subnet=str(pool.subnet),
        ips=pool.ips_text(),
        exclude_ips=pool.exclude_text(),
        gateway=str(pool.gateway) if pool.gateway else "",
        routes=_routes(pool),
        default=pool.default,
        disable=pool.disable,
        node_name=list(pool.node_name),
        namespace_name=list(pool.namespace_name),
        multus_name=list(pool.multus_name),
    )


def pool_from_pb(msg: pb.Pool) -> Pool:
    spec: dict[str, Any] = {
        "ipVersion": msg.ip_version or None,
        "subnet": msg.subnet,
        "ips": list(msg.ips),
        "excludeIPs": list(msg.exclude_ips),
        "gateway": msg.gateway or None,
        "routes": [{"dst": r.dst, "gw": r.gw} for r in msg.routes],
        "default": msg.default,
        "disable": msg.disable,
        "nodeName": list(msg.node_name),
        "namespaceName": list(msg.namespace_name),
        "multusName": list(msg.multus_name),
    }
    return pool_from_spec(msg.name, spec)


def usage_to_pb(usage: PoolUsage) -> pb.PoolInfo:
    return pb.PoolInfo(
        pool=pool_to_pb(usage.pool),
        total_count=str(usage.total),
        allocated_count=str(usage.allocated),
    )


def reserved_to_pb(res: ReservedIP) -> pb.ReservedIP:
    return pb.ReservedIP(name=res.name, ip_version=res.version, ips=res.ips_text())


def lease_to_pb(lease: Lease) -> pb.Allocation:
    row = lease.row
    return pb.Allocation(
        pool=row.pool,
        ip=row.ip,
        version=row.version,
        network=row.network,
        container_id=row.container_id or "",
        ifname=row.ifname,
        netns=row.netns,
        pod_namespace=row.pod_namespace,
        pod_name=row.pod_name,
        pod_uid=row.pod_uid,
        node=row.node,
        sticky=row.sticky,
        created_at=row.created_at,
        address=lease.address,
    )


class IpamServicer(pb_grpc.IpamServicer):
    def __init__(
        self,
        engine: Engine,
        metrics: IpamdMetrics | None = None,
        node_name: str = "",
        node_reconcile_grace: float = 120.0,
    ) -> None:
        self._engine = engine
        self._metrics = metrics
        self._node_name = node_name
        self._grace = node_reconcile_grace

    def _failed(self, method: str, request: Any, code: grpc.StatusCode) -> None:
        if self._metrics is None:
            return
        self._metrics.rpc_error(method, code.name)
        if method == "Allocate":
            pools = [*request.ipv4_pools, *request.ipv6_pools]
            self._metrics.allocation_failed(pools, code.name)
        elif method == "Release":
            self._metrics.release_failed(code.name)

    async def _call(
        self, job: Callable[[AllocState], tuple[Any, Sequence[Any]]]
    ) -> Any:
        # No asyncio.wait_for: it costs a task per RPC, and the client's gRPC
        # deadline already bounds the wait (the writer always answers).
        return await self._engine.submit_async(job)

    @_rpc
    async def Allocate(
        self, request: pb.AllocateRequest, context: Any
    ) -> pb.AllocateReply:
        req = AllocateRequest(
            network=request.network,
            container_id=request.container_id,
            ifname=request.ifname,
            netns=request.netns,
            pod_namespace=request.pod_namespace,
            pod_name=request.pod_name,
            pod_uid=request.pod_uid,
            node=request.node,
            ipv4_pools=tuple(request.ipv4_pools),
            ipv6_pools=tuple(request.ipv6_pools),
            requested_ips=tuple(request.requested_ips),
            sticky=request.sticky,
            match_master_subnet=request.match_master_subnet,
            master=request.master,
            master_addresses=tuple(request.master_addresses),
        )
        started = time.perf_counter()
        leases = await self._call(lambda st: st.allocate(req))
        if self._metrics is not None:
            pools = [lease.pool.name for lease in leases]
            self._metrics.allocated(pools, time.perf_counter() - started)
        return lease_reply(leases)

    @_rpc
    async def Release(
        self, request: pb.ReleaseRequest, context: Any
    ) -> pb.ReleaseReply:
        if not request.container_id or not request.ifname:
            raise InvalidRequest("container_id and ifname are required")
        rows = await self._call(
            lambda st: st.release(request.network, request.container_id, request.ifname)
        )
        if self._metrics is not None:
            self._metrics.released([row.pool for row in rows])
        return pb.ReleaseReply(released=len(rows))

    @_rpc
    async def Check(self, request: pb.CheckRequest, context: Any) -> pb.AllocateReply:
        leases = await self._call(
            lambda st: (
                st.get(request.container_id, request.ifname, request.network),
                (),
            )
        )
        if not leases:
            raise NotFound(
                f"no allocation for container {request.container_id} "
                f"ifname {request.ifname}"
                + (f" in network {request.network}" if request.network else "")
            )
        return lease_reply(leases)

    @_rpc
    async def GarbageCollect(
        self, request: pb.GarbageCollectRequest, context: Any
    ) -> pb.GarbageCollectReply:
        valid = [(a.container_id, a.ifname) for a in request.valid]
        rows = await self._call(lambda st: st.gc(request.network, valid))
        if self._metrics is not None:
            self._metrics.gc_released(len(rows))
        attachments = {(r.container_id, r.ifname) for r in rows}
        return pb.GarbageCollectReply(
            released_attachments=len(attachments), released_addresses=len(rows)
        )

    @_rpc
    async def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusReply:
        engine = self._engine
        lease = engine.lease
        reply = pb.StatusReply(
            server_version=RELEASE,
            api_version=API_VERSION,
            role=engine.role.value,
            lease_holder=lease.holder if lease.remaining > 0 else "",
            database=engine.database,
        )
        if not engine.active:
            # Not ready: a Kubernetes Service and the plugins' STATUS route
            # to the active replica only.
            reply.ready = False
            reply.message = str(engine.unavailable())
            return reply
        try:
            reply.pools, reply.allocations = await self._call(
                lambda st: ((len(st.pools), len(st.rows)), ())
            )
        except Unavailable as exc:
            reply.ready = False
            reply.message = str(exc)
            return reply
        reply.ready = True
        reply.message = "ready"
        return reply

    @_rpc
    async def ApplyPools(
        self, request: pb.ApplyPoolsRequest, context: Any
    ) -> pb.ApplyPoolsReply:
        pools: list[Pool] = []
        reserved: list[ReservedIP] = []
        if request.manifest:
            pools, reserved = parse_manifest(request.manifest)
        pools += [pool_from_pb(p) for p in request.pools]
        reserved += [
            reserved_from_spec(
                r.name, {"ipVersion": r.ip_version or None, "ips": list(r.ips)}
            )
            for r in request.reserved
        ]
        if not pools and not reserved:
            raise InvalidRequest("nothing to apply")
        result = await self._call(
            lambda st: pool_admin.apply_pools(st, pools, reserved, request.dry_run)
        )
        return pb.ApplyPoolsReply(
            created=result.created,
            configured=result.configured,
            unchanged=result.unchanged,
        )

    @_rpc
    async def GetPool(self, request: pb.GetPoolRequest, context: Any) -> pb.PoolInfo:
        usage = await self._call(lambda st: (pool_admin.usage(st, request.name), ()))
        return usage_to_pb(usage)

    @_rpc
    async def ListPools(
        self, request: pb.ListPoolsRequest, context: Any
    ) -> pb.ListPoolsReply:
        usages, reserved = await self._call(
            lambda st: (
                (
                    pool_admin.list_usage(st),
                    [st.reserved[n] for n in sorted(st.reserved)],
                ),
                (),
            )
        )
        return pb.ListPoolsReply(
            pools=[usage_to_pb(u) for u in usages],
            reserved=[reserved_to_pb(r) for r in reserved],
        )

    @_rpc
    async def DeletePool(
        self, request: pb.DeletePoolRequest, context: Any
    ) -> pb.DeletePoolReply:
        kind = request.kind or "SpiderIPPool"
        if kind == "SpiderIPPool":
            await self._call(
                lambda st: (None, pool_admin.delete_pool(st, request.name))
            )
        elif kind == "SpiderReservedIP":
            await self._call(
                lambda st: (None, pool_admin.delete_reserved(st, request.name))
            )
        else:
            raise InvalidRequest(f"unknown kind {kind!r}")
        return pb.DeletePoolReply()

    @_rpc
    async def ListAllocations(
        self, request: pb.ListAllocationsRequest, context: Any
    ) -> pb.ListAllocationsReply:
        leases = await self._call(
            lambda st: (
                st.list_rows(
                    network=request.network,
                    pool=request.pool,
                    container_id=request.container_id,
                    pod_namespace=request.pod_namespace,
                    pod_name=request.pod_name,
                    node=request.node,
                ),
                (),
            )
        )
        return pb.ListAllocationsReply(allocations=[lease_to_pb(x) for x in leases])

    @_rpc
    async def ReleaseAllocation(
        self, request: pb.ReleaseAllocationRequest, context: Any
    ) -> pb.ReleaseReply:
        rows = await self._call(
            lambda st: st.release_admin(
                request.container_id, request.ifname, request.pool, request.ip
            )
        )
        return pb.ReleaseReply(released=len(rows))

    @_rpc
    async def ReconcileNode(
        self, request: pb.ReconcileNodeRequest, context: Any
    ) -> pb.ReconcileNodeReply:
        auth = context.auth_context() or {}
        node, how = proven_node(auth, context.peer() or "", self._node_name)
        if not request.node or node != request.node:
            log.warning(
                "ReconcileNode for node %r refused: %s",
                request.node,
                how if not node else f"the caller is {node!r} ({how})",
            )
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"a report for node {request.node!r} must come from that node: "
                + (how if not node else f"the caller proves it is {node!r} ({how})"),
            )
        held = [(a.container_id, a.ifname) for a in request.attachments]
        outcome = await self._call(
            lambda st: st.reconcile_node(
                node, held, request.networks, self._grace, request.dry_run
            )
        )
        for lease in outcome.released:
            row = lease.row
            log.info(
                "%s %s/%s of %s/%s (container %s %s) on node %s: no attachment "
                "on the node explains it",
                "would release" if request.dry_run else "released",
                row.pool,
                row.ip,
                row.pod_namespace,
                row.pod_name,
                row.container_id,
                row.ifname,
                node,
            )
        if self._metrics is not None and not request.dry_run:
            self._metrics.released([lease.row.pool for lease in outcome.released])
        return pb.ReconcileNodeReply(
            released=[lease_to_pb(lease) for lease in outcome.released],
            within_grace=outcome.within_grace,
            grace_seconds=self._grace,
        )
