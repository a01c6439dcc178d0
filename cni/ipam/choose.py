# SPDX-License-Identifier: Apache-2.0
"""Pick the IPAM implementation for a netconf's ``ipam`` section.

``railyard`` and ``spiderpool`` are served by ipamd over gRPC, in-process
(Spiderpool's rendered configs work unchanged); every other type is executed
from CNI_PATH as the spec says. Both implementations are imported lazily here,
so a plugin that fails on its config never loads grpc.

Standard library only at module level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cni.ipam import Budget, IpamClient

#: ``ipam.type`` values ipamd answers for. Where ipamd is (socket or TLS
#: endpoint) is read by ``IpamdClient.from_netconf``: ``ipam.socket`` >
#: $RAILYARD_IPAMD_SOCKET > /run/railyard/ipamd.sock. Spiderpool's
#: ``ipam_unix_socket_path`` names spiderpool-agent's HTTP socket, not ours, so it
#: is deliberately not read.
IPAMD_TYPES = frozenset({"railyard", "spiderpool"})


def ipam_type(netconf: Mapping[str, Any]) -> str:
    ipam = netconf.get("ipam")
    if not isinstance(ipam, Mapping):
        return ""
    value = ipam.get("type", "")
    return value if isinstance(value, str) else ""


def choose_ipam(
    netconf: Mapping[str, Any],
    env: Mapping[str, str],
    budget: Budget | None = None,
) -> IpamClient | None:
    """The IpamClient for ``netconf`` (the whole plugin config), None without ipam.

    ``budget`` (``cni.deadline.remaining``) bounds every blocking IPAM call by
    the time the command has left.
    """
    kind = ipam_type(netconf)
    if not kind:
        return None
    if kind in IPAMD_TYPES:
        from cni.ipam.grpc_client import IpamdClient

        return IpamdClient.from_netconf(netconf, env, budget=budget)
    from cni.ipam.delegate import DelegateIpam

    return DelegateIpam(netconf, env, budget=budget)
