# SPDX-License-Identifier: Apache-2.0
"""``railyard-ipam``: the CNI IPAM plugin backed by ipamd, as small as a Go main.

Imports only skel and the light command module: VERSION and config errors
never load grpc (it comes with the client, inside ``commands``' factory).
"""

from __future__ import annotations

from cni._version import VERSION
from cni.plugins.ipam import commands
from cni.skel import main as run


def main() -> None:
    run(
        commands.plugin_funcs(),
        about=f"railyard ipam {VERSION}",
        plugin_name="railyard-ipam",
    )


if __name__ == "__main__":
    main()
