# SPDX-License-Identifier: Apache-2.0
"""``railyard-ipam``: the CNI entry point, as small as a Go main.

skel gets a factory, not the command module: VERSION (which podman runs before
every ADD and DEL) and env/stdin errors are answered before ``commands`` (and
with it cni.attach / cni.kernel) is imported.
"""

from __future__ import annotations

from cni._version import VERSION
from cni.skel import PluginFuncs
from cni.skel import main as run


def _funcs() -> PluginFuncs:
    from cni.plugins.ipam import commands

    return commands.plugin_funcs()


def main() -> None:
    run(_funcs, about=f"railyard ipam {VERSION}", plugin_name="railyard-ipam")


if __name__ == "__main__":
    main()
