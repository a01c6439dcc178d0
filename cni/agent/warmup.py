# SPDX-License-Identifier: Apache-2.0
"""What a spare worker of the agent prepares before its request arrives.

The plugins' IPAM is ipamd over gRPC; in a fresh worker its first call pays
for gRPC's start and the connection (~5-10 ms). A spare opens the channel to
the endpoints a plugin config without ``ipam.endpoints``/``ipam.socket``
would use (``--ipamd``, else $RAILYARD_IPAMD_SOCKET, else the default socket;
TLS files from $RAILYARD_IPAMD_TLS_*), so the plugin's client finds it
connected (``ipamd.client.open_ahead``). A request for another ipamd, or none
(rdma), just does not use it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence

log = logging.getLogger(__name__)

#: How long a spare waits for ipamd to accept before it says ready anyway.
CONNECT_WAIT = 1.0


def ipamd_channels(
    env: Mapping[str, str], endpoints: Sequence[str] = ()
) -> Callable[[], None] | None:
    """The spare's preparation: open (and connect) a channel per endpoint.

    None (nothing to prepare, said once here) when a TLS file named in the
    environment cannot be read: every spare would fail on it again. A bad
    ``endpoints`` raises ValueError, as a plugin's ``ipam.endpoints`` would.
    """
    from ipamd import client as transport

    ipam = {"endpoints": list(endpoints)} if endpoints else {}
    resolved = transport.IpamdClient.from_config(ipam, env)
    unreadable = [str(p) for p in resolved.tls if p and not os.access(p, os.R_OK)]
    if unreadable:
        log.warning(
            "spare workers will not connect to ipamd ahead: cannot read TLS file(s) %s",
            ", ".join(unreadable),
        )
        return None

    def prepare() -> None:
        transport.open_ahead(resolved.targets, *resolved.tls, wait=CONNECT_WAIT)

    return prepare


def keep_ipamd_channels() -> None:
    """What every worker runs before its first request: its ipamd clients keep
    their channels from one request to the next (``ipamd.client.keep_channels``)."""
    from ipamd import client as transport

    transport.keep_channels()
