# SPDX-License-Identifier: Apache-2.0
"""The IPAM seam of the plugins: a Protocol and plain records. Nothing heavy.

Two implementations, each imported lazily by ``cni.ipam.choose``:
- ``cni.ipam.grpc_client.IpamdClient``: ipamd over its unix socket (or TLS),
  called in-process, for ``ipam.type`` ``railyard`` and ``spiderpool``;
- ``cni.ipam.delegate.DelegateIpam``: any other ``ipam.type`` executed from
  CNI_PATH as the spec says (host-local, static, whereabouts).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cni.errors import INVALID_CONFIG, TRY_AGAIN_LATER


@dataclass(frozen=True, slots=True)
class IpamRequest:
    """Everything an allocation is keyed and filtered by."""

    network: str  # netconf "name"
    container_id: str
    ifname: str
    netns: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    node_name: str = ""
    ipv4_pools: tuple[str, ...] = ()
    ipv6_pools: tuple[str, ...] = ()
    requested_ips: tuple[str, ...] = ()  # runtimeConfig.ips / args.cni.ips
    # Keep the address for (pod namespace/name, network, ifname) across DEL so a
    # StatefulSet pod gets it back after a restart (ipamd only; added by ipamd).
    sticky: bool = False
    # Spiderpool's matchMasterSubnet (``ipam.match_master_subnet``): ipamd
    # takes, of the candidate pools, the one whose subnet holds an address of
    # ``master`` (the VF's PF), which the plugin reads on the node.
    match_master_subnet: bool = False
    master: str = ""
    master_addresses: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IpamAddress:
    """One allocated address; ``address`` is a CIDR with the pool's prefix."""

    address: str  # "172.16.11.5/24"
    gateway: str | None = None
    pool: str = ""
    version: int = 4


@dataclass(frozen=True, slots=True)
class IpamRoute:
    dst: str
    gw: str | None = None


@dataclass(slots=True)
class IpamResult:
    ips: list[IpamAddress] = field(default_factory=list)
    routes: list[IpamRoute] = field(default_factory=list)
    dns: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attachment:
    """A (container ID, ifname) pair from ``cni.dev/valid-attachments``."""

    container_id: str
    ifname: str


class IpamError(Exception):
    """IPAM refused or failed; ``code`` is a CNI error code to report."""

    def __init__(
        self, code: int, msg: str, details: str = "", *, unchanged: bool = False
    ) -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details
        #: The IPAM was never reached (not found, unusable, no daemon
        #: answering): nothing can have been allocated or released by this
        #: call, so nothing is left to undo or to retry later.
        self.unchanged = unchanged


class IpamClient(Protocol):
    """What a plugin asks of its IPAM, whoever implements it."""

    #: The allocation may use the pod's interface, so it must wait until the
    #: interface is in the pod under CNI_IFNAME (a delegated plugin: dhcp
    #: runs DHCP on it). False lets an ADD ask while the VF is still moving.
    uses_interface: bool

    def allocate(self, req: IpamRequest) -> IpamResult:
        """Idempotent per (container_id, ifname): a retry returns the same IPs."""
        ...

    def release(self, network: str, container_id: str, ifname: str) -> None:
        """Release the attachment's addresses; succeeds when there are none."""
        ...

    def check(self, network: str, container_id: str, ifname: str) -> IpamResult:
        """The addresses held for the attachment (raises IpamError if none)."""
        ...

    def gc(self, network: str, valid: Sequence[Attachment]) -> int:
        """Release every attachment of ``network`` not in ``valid``; the count."""
        ...

    def status(self) -> None:
        """Raise IpamError(50, ...) when the IPAM cannot allocate."""
        ...

    def close(self) -> None: ...


#: A plugin type is a bare file name looked up in CNI_PATH, never a path: a
#: "/" or ".." would run a binary outside the directories the runtime chose.
_PLUGIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")


def check_plugin_type(plugin: object) -> None:
    """IpamError 7 (``unchanged``) unless ``plugin`` is a bare plugin name."""
    if not isinstance(plugin, str) or not _PLUGIN_NAME.fullmatch(plugin):
        raise IpamError(
            INVALID_CONFIG,
            "invalid IPAM plugin type",
            f"{repr(plugin)[:80]}: a plugin name from CNI_PATH, not a path",
            unchanged=True,
        )


#: Seconds left for a blocking call before the command's deadline (None:
#: unbounded); the plugins pass ``cni.deadline.remaining``.
Budget = Callable[[], "float | None"]


def time_left(budget: Budget | None, what: str, skipped: str) -> float | None:
    """The seconds the next blocking IPAM call ``what`` may take (None:
    unbounded); IpamError 11 (``unchanged``, ``skipped`` as details) when the
    command has no time left for it."""
    left = budget() if budget is not None else None
    if left is not None and left <= 0:
        raise IpamError(
            TRY_AGAIN_LATER,
            f"{what}: no time left before the command's deadline",
            skipped,
            unchanged=True,
        )
    return left
