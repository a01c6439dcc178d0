# SPDX-License-Identifier: Apache-2.0
"""``railyard-sriov`` / ``sriov``: the CNI entry point, as small as a Go main."""

from __future__ import annotations

from cni._version import VERSION
from cni.plugins.sriov import commands
from cni.skel import main as run


def main() -> None:
    run(commands.FUNCS, about=f"railyard sriov {VERSION}", plugin_name="sriov")


if __name__ == "__main__":
    main()
