# SPDX-License-Identifier: Apache-2.0
"""``railyard-ib-sriov`` / ``ib-sriov``: the CNI entry point, as small as a Go main.

skel gets a factory, not the command module: VERSION (which podman runs before
every ADD and DEL) and env/stdin errors are answered before ``commands`` (and
with it cni.attach / cni.kernel) is imported.
"""

from __future__ import annotations

from cni._version import VERSION
from cni.skel import PluginFuncs
from cni.skel import main as run


def _funcs() -> PluginFuncs:
    from cni.plugins.ib_sriov import commands

    return commands.FUNCS


def main() -> None:
    run(_funcs, about=f"railyard ib-sriov {VERSION}", plugin_name="ib-sriov")


if __name__ == "__main__":
    main()
