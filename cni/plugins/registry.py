# SPDX-License-Identifier: Apache-2.0
"""Every plugin of this project by CNI type: one place to find and run them.

Each plugin package ``cni.plugins.<pkg>`` has a ``commands`` module exposing
``plugin_funcs(make_deps, make_ipam) -> PluginFuncs``; ``None`` for either
factory means the plugin's production default. A caller that runs plugins
with dependencies of its own (the simulated host's launchers, a node agent
running plugins in-process through ``cni.skel.run_plugin``) goes through
``funcs_factory``; a plugin's ``__main__`` through ``main``.

Imports: the standard library, ``cni._version`` and ``cni.skel`` only; the
commands module is imported when a command is about to run, so VERSION and
env/stdin errors never load it (cold start).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

from cni._version import VERSION
from cni.skel import PluginFuncs
from cni.skel import main as skel_main

if TYPE_CHECKING:
    from cni.attach.commands import IpamFactory
    from cni.deps import DepsFactory


@dataclass(frozen=True, slots=True)
class Plugin:
    """One CNI plugin: its type name and its package."""

    cni_type: str
    package: str  # e.g. "cni.plugins.sriov"
    title: str = ""  # in the about string; the CNI type when empty

    @property
    def script(self) -> str:
        """Its console script in pyproject.toml, which packaging/install.sh
        installs as ``<cni-bin-dir>/<cni_type>``."""
        prefix = "railyard-"
        return (
            self.cni_type
            if self.cni_type.startswith(prefix)
            else prefix + self.cni_type
        )

    @property
    def commands_module(self) -> str:
        return f"{self.package}.commands"

    @property
    def about(self) -> str:
        return f"railyard {self.title or self.cni_type} {VERSION}"

    def funcs(
        self,
        make_deps: DepsFactory | None = None,
        make_ipam: IpamFactory | None = None,
    ) -> PluginFuncs:
        """The plugin's command functions over the given (or default) factories."""
        commands: Any = import_module(self.commands_module)
        funcs: PluginFuncs = commands.plugin_funcs(make_deps, make_ipam)
        return funcs


#: CNI type -> plugin: the one list of the plugins, read by packaging/install.sh
#: (the binaries it installs) and tests/test_import_hygiene.py too.
#: "railyard-ipam" is the IPAM-only binary other main plugins exec; ipam types
#: "railyard"/"spiderpool" are served in-process.
PLUGINS: dict[str, Plugin] = {
    p.cni_type: p
    for p in (
        Plugin("sriov", "cni.plugins.sriov"),
        Plugin("ib-sriov", "cni.plugins.ib_sriov"),
        Plugin("rdma", "cni.plugins.rdma"),
        Plugin("railyard-ipam", "cni.plugins.ipam", title="ipam"),
    )
}


def plugin(cni_type: str) -> Plugin:
    try:
        return PLUGINS[cni_type]
    except KeyError:
        raise KeyError(
            f"no railyard plugin of CNI type {cni_type!r} "
            f"(known: {', '.join(sorted(PLUGINS))})"
        ) from None


def funcs_factory(
    cni_type: str,
    make_deps: DepsFactory | None = None,
    make_ipam: IpamFactory | None = None,
) -> Callable[[], PluginFuncs]:
    """What ``cni.skel.run_plugin`` takes: the funcs, built only when needed."""
    entry = plugin(cni_type)
    return lambda: entry.funcs(make_deps, make_ipam)


def main(
    cni_type: str,
    make_deps: DepsFactory | None = None,
    make_ipam: IpamFactory | None = None,
    about: str | None = None,
) -> None:
    """A plugin process: run one CNI command and exit with its code."""
    entry = plugin(cni_type)
    skel_main(
        funcs_factory(cni_type, make_deps, make_ipam),
        about=about or entry.about,
        plugin_name=cni_type,
    )
