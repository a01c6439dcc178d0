# SPDX-License-Identifier: Apache-2.0
"""The container runtime's pod sandboxes, over the CRI (``runtime.v1``).

The node agent's reconcile asks the runtime which sandboxes it knows: a
record whose container ID (a CNI_CONTAINERID is the sandbox ID) is not among
them belongs to a pod the runtime lost or removed without a DEL. containerd
and CRI-O both serve ``runtime.v1.RuntimeService`` on their socket
(``/run/containerd/containerd.sock``, ``/var/run/crio/crio.sock``);
``auto`` takes the first of those that exists. Only a complete answer counts:
any failure raises ``CriUnavailable`` and the caller judges without the
runtime (netns and VF only).

The two messages read are declared here with protobuf's descriptor API,
fields numbered as k8s.io/cri-api's ``api.proto`` (unknown fields are skipped
on decode), instead of vendoring that whole file and its generated code for
one RPC. grpc and protobuf are what the plugins' ipamd client already uses.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

AUTO = "auto"
#: Sockets ``auto`` tries, in order: containerd, then CRI-O.
KNOWN_SOCKETS = (
    Path("/run/containerd/containerd.sock"),
    Path("/var/run/crio/crio.sock"),
)
LIST_POD_SANDBOX = "/runtime.v1.RuntimeService/ListPodSandbox"
VERSION = "/runtime.v1.RuntimeService/Version"


class CriUnavailable(RuntimeError):
    """The runtime could not be asked, or did not answer in full."""


@dataclass(frozen=True, slots=True)
class Sandbox:
    id: str
    name: str
    namespace: str
    uid: str
    ready: bool


def _messages() -> dict[str, Any]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="railyard_cri_subset.proto", package="runtime.v1", syntax="proto3"
    )

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        msg = proto.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            field = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                field.type_name = type_name

    one, many = f.LABEL_OPTIONAL, f.LABEL_REPEATED
    message("ListPodSandboxRequest")  # filter (1) left unset: every sandbox
    message(
        "PodSandboxMetadata",
        ("name", 1, f.TYPE_STRING, one, ""),
        ("uid", 2, f.TYPE_STRING, one, ""),
        ("namespace", 3, f.TYPE_STRING, one, ""),
    )
    message(
        "PodSandbox",
        ("id", 1, f.TYPE_STRING, one, ""),
        ("metadata", 2, f.TYPE_MESSAGE, one, ".runtime.v1.PodSandboxMetadata"),
        # PodSandboxState: 0 SANDBOX_READY, 1 SANDBOX_NOTREADY.
        ("state", 3, f.TYPE_INT32, one, ""),
    )
    message(
        "ListPodSandboxResponse",
        ("items", 1, f.TYPE_MESSAGE, many, ".runtime.v1.PodSandbox"),
    )
    message("VersionRequest", ("version", 1, f.TYPE_STRING, one, ""))
    message(
        "VersionResponse",
        ("version", 1, f.TYPE_STRING, one, ""),
        ("runtime_name", 2, f.TYPE_STRING, one, ""),
        ("runtime_version", 3, f.TYPE_STRING, one, ""),
        ("runtime_api_version", 4, f.TYPE_STRING, one, ""),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"runtime.v1.{name}")
        )
        for name in (
            "ListPodSandboxRequest",
            "ListPodSandboxResponse",
            "VersionRequest",
            "VersionResponse",
        )
    }


def resolve_socket(setting: str, known: Sequence[Path] = KNOWN_SOCKETS) -> Path | None:
    """The runtime socket to ask: ``auto`` (the first known one that exists),
    "" (none), or a path."""
    if not setting:
        return None
    if setting == AUTO:
        return next((p for p in known if p.exists()), None)
    return Path(setting)


class CriSandboxes:
    """``ListPodSandbox`` on the runtime socket ``setting`` names (a path, or
    ``auto``: found again at every call, so a runtime started after the agent
    is asked too); a channel per call. The message classes are built here,
    once, so a process forked later imports nothing to use them."""

    def __init__(
        self,
        setting: str,
        timeout: float = 5.0,
        known: Sequence[Path] = KNOWN_SOCKETS,
    ) -> None:
        self.setting = setting
        self.timeout = timeout
        self._known = known
        self._types = _messages()

    @property
    def socket_path(self) -> Path | None:
        return resolve_socket(self.setting, self._known)

    def _call(self, method: str, request: Any, reply: str) -> Any:
        import grpc

        sock = self.socket_path
        if sock is None:
            raise CriUnavailable(
                "no container runtime socket ("
                + ", ".join(str(p) for p in self._known)
                + ")"
            )
        decode = self._types[reply].FromString
        try:
            with grpc.insecure_channel(f"unix://{sock}") as channel:
                call = channel.unary_unary(
                    method,
                    request_serializer=lambda msg: msg.SerializeToString(),
                    response_deserializer=decode,
                )
                return call(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code().name if hasattr(exc, "code") else "ERROR"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise CriUnavailable(
                f"CRI {method.rsplit('/', 1)[-1]} on {sock}: {code} {details}"
            ) from None

    def runtime(self) -> str:
        """``name version`` of the runtime, for the log."""
        reply = self._call(
            VERSION, self._types["VersionRequest"](version="v1"), "VersionResponse"
        )
        return f"{reply.runtime_name} {reply.runtime_version}".strip()

    def list(self) -> list[Sandbox]:
        """Every sandbox the runtime knows, ready or not."""
        reply = self._call(
            LIST_POD_SANDBOX,
            self._types["ListPodSandboxRequest"](),
            "ListPodSandboxResponse",
        )
        return [
            Sandbox(
                id=item.id,
                name=item.metadata.name,
                namespace=item.metadata.namespace,
                uid=item.metadata.uid,
                ready=item.state == 0,
            )
            for item in reply.items
        ]
