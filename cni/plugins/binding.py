# SPDX-License-Identifier: Apache-2.0
"""The one shape of a plugin's commands, bound to its dependency factories.

Every plugin's ``commands`` module defines ``add``, ``delete``, ``check``,
``status`` and ``gc``, each ``(args, conf, deps, ipam)``, and its
``config.load_conf(args) -> Conf``; ``plugin_funcs(make_deps, make_ipam)``
hands them to ``bind``, which is what ``cni.skel`` calls. Per command, in this
order: the config is loaded and validated (a config error costs no pyroute2 or
grpc import), the deps and the IPAM client are built from the factories (only
for the commands the plugin declares it needs them in: ``None`` is passed
otherwise), the function runs, and both are closed, also on error.

GC, one policy for every plugin (SPEC "GC"): go on past a failed attachment,
then fail the command with every failure named (``gc_failed``), so the runtime
retries later and an operator sees what is stuck; nothing is ever left behind
silently.

A kernel error no step translated becomes its CNI code here
(``cni.kernel.cni_errors``), never an internal error.

Imports: standard library and the light ``cni.errors``/``cni.skel``/``cni.kernel``
contract.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from cni.errors import DEVICE_ERROR, CniError
from cni.kernel import KernelError
from cni.kernel.cni_errors import cni_error
from cni.skel import CmdArgs, PluginFuncs

if TYPE_CHECKING:
    from cni.attach.commands import IpamFactory
    from cni.deps import DepsFactory
    from cni.types import Result

C = TypeVar("C")

ADD, DEL, CHECK, STATUS, GC = "ADD", "DEL", "CHECK", "STATUS", "GC"
EVERY_COMMAND = frozenset({ADD, DEL, CHECK, STATUS, GC})

#: ``(args, conf, deps, ipam)``: deps is a ``cni.deps.Deps`` or None, ipam an
#: ``IpamClient`` or None, per the plugin's ``Commands.deps_in/ipam_in``.
Command = Callable[[CmdArgs, C, Any, Any], Any]


@dataclass(frozen=True, slots=True)
class Commands(Generic[C]):
    """A plugin's five commands, its config loader and what each command needs."""

    load_conf: Callable[[CmdArgs], C]
    add: Command[C]
    delete: Command[C]
    check: Command[C]
    status: Command[C]
    gc: Command[C]
    #: Commands that get ``Deps`` (the kernel) / an IPAM client; None otherwise.
    deps_in: Collection[str] = EVERY_COMMAND
    ipam_in: Collection[str] = EVERY_COMMAND
    #: DEL's IPAM client is built from this netconf, given ``(args, deps)``:
    #: the IPAM that allocated (``cni.attach.teardown.ipam_netconf``) may not
    #: be the one the netconf names now. None: the command's netconf.
    del_ipam_netconf: Callable[[CmdArgs, Any], Mapping[str, Any]] | None = None


def bind(
    commands: Commands[C], make_deps: DepsFactory, make_ipam: IpamFactory
) -> PluginFuncs:
    """The ``PluginFuncs`` running ``commands`` with deps/IPAM from the factories."""

    def run(command: str, fn: Command[C]) -> Callable[[CmdArgs], Any]:
        def call(args: CmdArgs) -> Any:
            conf = commands.load_conf(args)
            deps = make_deps(args) if command in commands.deps_in else None
            try:
                pick = commands.del_ipam_netconf if command == DEL else None
                netconf = args.netconf if pick is None else pick(args, deps)
                ipam = (
                    make_ipam(netconf, args.env)
                    if command in commands.ipam_in
                    else None
                )
                try:
                    return fn(args, conf, deps, ipam)
                except KernelError as exc:
                    # The last resort: every step names itself (cni_errors).
                    raise cni_error(
                        exc, f"{command} of {args.ifname or 'the network'} failed"
                    ) from exc
                finally:
                    if ipam is not None:
                        ipam.close()
            finally:
                if deps is not None:
                    deps.close()

        return call

    add: Callable[[CmdArgs], Result | None] = run(ADD, commands.add)
    return PluginFuncs(
        add=add,
        del_=run(DEL, commands.delete),
        check=run(CHECK, commands.check),
        status=run(STATUS, commands.status),
        gc=run(GC, commands.gc),
    )


def gc_failed(errors: Sequence[str]) -> None:
    """The GC policy: after going on past every failure, report them all."""
    if errors:
        raise CniError(DEVICE_ERROR, "GC incomplete", "; ".join(errors))
