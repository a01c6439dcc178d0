# SPDX-License-Identifier: Apache-2.0
"""The production plugin table: CNI type -> how direct mode runs it.

The one place that knows how each plugin's ``__main__`` builds its command
functions, so ``railyard-agent`` runs a request on the path the exec'd plugin
takes. Another table (the simulated host's, a test's) is passed to
``cni.agent.server.Agent`` the same way; the agent never looks for one.
"""

from __future__ import annotations

from cni._version import VERSION
from cni.agent.server import PluginEntry, PluginTable
from cni.plugins.ib_sriov import __main__ as ib_sriov_main
from cni.plugins.ipam import __main__ as ipam_main
from cni.plugins.rdma import __main__ as rdma_main
from cni.plugins.sriov import __main__ as sriov_main

#: Imported by the agent before it listens: what the first ADD would load lazily.
PRELOAD: tuple[str, ...] = (
    "cni.deps",
    "cni.args",
    "cni.types",
    "cni.kernel.links",
    "cni.kernel.netns",
    "cni.kernel.probes",
    "cni.kernel.sysfs",
    "cni.kernel.udev",
    "cni.kernel.vf",
    "cni.kernel.rdma",
    "cni.ipam.choose",
    "cni.ipam.grpc_client",
    "cni.ipam.delegate",
)


def production_table() -> PluginTable:
    """sriov, ib-sriov, rdma and railyard-ipam, as their console scripts run them."""
    return {
        "sriov": PluginEntry(sriov_main._funcs, f"railyard sriov {VERSION}", "sriov"),
        "ib-sriov": PluginEntry(
            ib_sriov_main._funcs, f"railyard ib-sriov {VERSION}", "ib-sriov"
        ),
        "rdma": PluginEntry(rdma_main._funcs, f"railyard rdma {VERSION}", "rdma"),
        "railyard-ipam": PluginEntry(
            ipam_main._funcs, f"railyard ipam {VERSION}", "railyard-ipam"
        ),
    }
