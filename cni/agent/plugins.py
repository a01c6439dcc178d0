# SPDX-License-Identifier: Apache-2.0
"""The production plugin table: every plugin of ``cni.plugins.registry``.

``railyard-agent`` runs each request with the plugin's production factories,
the way its console script does. Another table (the simulated host's, a
test's) is passed to ``cni.agent.server.Agent`` the same way; the agent never
looks for one.
"""

from __future__ import annotations

from cni.agent.server import PluginEntry, PluginTable
from cni.plugins.registry import PLUGINS

#: Imported by the agent before it listens: what the first ADD would load lazily.
PRELOAD: tuple[str, ...] = (
    "cni.deps",
    "cni.args",
    "cni.types",
    "cni.kernel.links",
    "cni.kernel.netns",
    "cni.kernel.probes",
    "cni.kernel.sysfs",
    "cni.kernel.topology",
    "cni.kernel.udev",
    "cni.kernel.vf",
    "cni.kernel.rdma",
    "cni.ipam.choose",
    "cni.ipam.grpc_client",
    "cni.ipam.delegate",
    # grpc loads its channel code at the first insecure_channel(): ~5 ms of
    # every worker's ipamd call otherwise. Importing it starts no thread
    # (the agent never opens a channel before forking).
    "grpc._channel",
)


def production_table() -> PluginTable:
    """sriov, ib-sriov, rdma and railyard-ipam over their default factories."""
    return {
        cni_type: PluginEntry(p.funcs, p.about, cni_type)
        for cni_type, p in PLUGINS.items()
    }
