# SPDX-License-Identifier: Apache-2.0
"""The one door from railyard to ipamd: its pools.

``apply`` needs two things of ipamd: the names of the pools it already has
(a network may name one that is not in the file) and ApplyPools with and
without ``dry_run`` (the server's own validation, e.g. a subnet change of a
pool in use, before anything is changed). ``IpamdPools`` is the Protocol the
rest of the package sees; ``GrpcIpamd`` implements it over ipamd's public
client. The client's import path lives on one line (``_client_class``), so
moving the client (to ``ipamd.client``) is a one-line change here; it is
imported when a connection is made, so ``--no-ipamd`` runs never load grpc.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ipamd.client import IpamdClient
    from railyard.gc import ClusterAllocation

__all__ = [
    "ApplyReport",
    "GrpcIpamd",
    "IpamdError",
    "IpamdPools",
]


class IpamdError(RuntimeError):
    """ipamd refused or could not be reached; the message is its reason
    (``unreachable``: it did not answer, try again later)."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclass(frozen=True, slots=True)
class ApplyReport:
    """ipamd's answer to ApplyPools: ``Kind/name`` per outcome."""

    created: tuple[str, ...] = ()
    configured: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    dry_run: bool = field(default=False)


class IpamdPools(Protocol):
    def pool_names(self) -> set[str]: ...

    def apply(self, manifest: str, dry_run: bool) -> ApplyReport: ...


class GrpcIpamd:
    """ipamd over gRPC (unix socket, or TCP with TLS / mutual TLS)."""

    def __init__(
        self,
        target: str,
        timeout: float = 30.0,
        tls_ca: Path | None = None,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
    ) -> None:
        self._client = _client_class()(target, timeout, tls_ca, tls_cert, tls_key)

    def pool_names(self) -> set[str]:
        from ipamd.api.v1 import ipam_pb2 as pb

        reply = self._call("ListPools", pb.ListPoolsRequest(client_version=_version()))
        return {p.pool.name for p in reply.pools}

    def apply(self, manifest: str, dry_run: bool) -> ApplyReport:
        from ipamd.api.v1 import ipam_pb2 as pb

        reply = self._call(
            "ApplyPools",
            pb.ApplyPoolsRequest(
                client_version=_version(), manifest=manifest, dry_run=dry_run
            ),
        )
        return ApplyReport(
            created=tuple(reply.created),
            configured=tuple(reply.configured),
            unchanged=tuple(reply.unchanged),
            dry_run=dry_run,
        )

    def _call(self, method: str, request: Any) -> Any:
        import grpc

        try:
            return getattr(self._client.stub, method)(
                request, timeout=self._client.timeout
            )
        except grpc.RpcError as err:
            code = err.code().name if hasattr(err, "code") else "ERROR"
            details = err.details() if hasattr(err, "details") else str(err)
            if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                raise IpamdError(
                    f"ipamd at {self._client.target} is not reachable ({code}): "
                    f"{details}",
                    unreachable=True,
                ) from None
            raise IpamdError(f"ipamd refused: {details}") from None

    def allocations(self) -> list[ClusterAllocation]:
        """Every address ipamd holds (``railyard gc``)."""
        from ipamd.api.v1 import ipam_pb2 as pb
        from railyard.gc import ClusterAllocation

        reply = self._call(
            "ListAllocations", pb.ListAllocationsRequest(client_version=_version())
        )
        return [
            ClusterAllocation(
                pool=a.pool,
                ip=a.ip,
                network=a.network,
                container_id=a.container_id,
                ifname=a.ifname,
                pod_namespace=a.pod_namespace,
                pod_name=a.pod_name,
                pod_uid=a.pod_uid,
                sticky=a.sticky,
                node=a.node,
            )
            for a in reply.allocations
        ]

    def release_attachment(self, container_id: str, ifname: str) -> int:
        """What a DEL releases: a sticky address stays held for its pod."""
        from ipamd.api.v1 import ipam_pb2 as pb

        reply = self._call(
            "Release",
            pb.ReleaseRequest(
                client_version=_version(), container_id=container_id, ifname=ifname
            ),
        )
        return int(reply.released)

    def release_address(self, pool: str, ip: str) -> int:
        """One address, also one held for a sticky pod."""
        from ipamd.api.v1 import ipam_pb2 as pb

        reply = self._call(
            "ReleaseAllocation",
            pb.ReleaseAllocationRequest(client_version=_version(), pool=pool, ip=ip),
        )
        return int(reply.released)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> GrpcIpamd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _client_class() -> type[IpamdClient]:
    from ipamd.client import IpamdClient

    return IpamdClient


def _version() -> str:
    from ipamd.api.v1.version import API_VERSION

    return API_VERSION
