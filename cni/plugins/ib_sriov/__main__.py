# SPDX-License-Identifier: Apache-2.0
"""``railyard-ib-sriov`` / ``ib-sriov``: the CNI entry point, as small as a Go main."""

from __future__ import annotations

from cni._version import VERSION
from cni.plugins.ib_sriov import commands
from cni.skel import main as run


def main() -> None:
    run(commands.FUNCS, about=f"railyard ib-sriov {VERSION}", plugin_name="ib-sriov")


if __name__ == "__main__":
    main()
