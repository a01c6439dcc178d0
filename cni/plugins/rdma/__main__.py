# SPDX-License-Identifier: Apache-2.0
"""``railyard-rdma`` / ``rdma``: the CNI entry point, as small as a Go main.

Imports only skel and the light command module: VERSION and config errors
never load pyroute2 (it comes with the adapters, inside ``real_deps``).
"""

from __future__ import annotations

from cni._version import VERSION
from cni.plugins.rdma import commands
from cni.skel import main as run


def main() -> None:
    run(commands.plugin_funcs(), about=f"railyard rdma {VERSION}", plugin_name="rdma")


if __name__ == "__main__":
    main()
