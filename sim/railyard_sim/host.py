# SPDX-License-Identifier: Apache-2.0
"""The simulated host's dependencies for the plugins: a ``DepsFactory``.

``deps_factory(lab_dir)`` is what the lab's launchers (``railyard_sim.launchers``)
hand to a plugin's ``plugin_funcs``: the production ``cni.deps.real_deps`` with
four adapters injected - ``SimSysfs`` (the fake PCI tree under ``<lab>/sys``),
the recording VF and RDMA ops of ``railyard_sim.recording`` and the RoCE TOS
files under ``<lab>/sys`` (``LabRoceTos``, with configfs' mkdir behaviour).
Links, netns, probes, udev, locks, caches and IPAM stay the production ones.
The state dir defaults to ``<lab>/state`` (``RAILYARD_STATE_DIR`` still wins).

Imports: standard library and ``cni`` at module level; the recording seam
(and through it the lab module) when deps are built.
"""

from __future__ import annotations

import logging
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path

from cni.deps import Deps, DepsFactory, real_deps
from cni.kernel import VfOps
from cni.kernel.roce import ConfigfsRoceTos
from cni.kernel.sysfs import Sysfs
from cni.skel import CmdArgs

log = logging.getLogger(__name__)

SYS_DIR = "sys"
STATE_DIR = "state"


class SimSysfs(Sysfs):
    """sysfs over the lab's fake PCI tree, following renames as the kernel's does.

    Real sysfs lists a netdev under its PCI function's ``net/`` by its current
    name; the fake tree holds plain directories, so a rename (a rebind that
    made a new netdev, a VF returned from a vanished netns as ``devN``) leaves
    a stale name behind. When the tree's name is not a link of this netns, the
    VF stand-in is found through its fabric peer and the tree re-synced first.
    """

    def __init__(self, lab_dir: Path) -> None:
        super().__init__(root=lab_dir / SYS_DIR)
        self.lab_dir = lab_dir

    def netdevs(self, pci: str) -> tuple[str, ...]:
        names = super().netdevs(pci)
        if not names or all(_is_link(n) for n in names):
            # No netdev (unbound, vfio) or all current: nothing to follow.
            return names
        from railyard_sim.recording import STATE, host_netdev

        if not (self.lab_dir / STATE).is_file():
            return names
        current = host_netdev(self.lab_dir, pci)
        if current is None or (current,) == names:
            return names
        log.info("sim sysfs: %s net/ follows its rename to %s", pci, current)
        return super().netdevs(pci)


def _is_link(name: str) -> bool:
    try:
        socket.if_nametoindex(name)
    except OSError:
        return False
    return True


class LabRoceTos(ConfigfsRoceTos):
    """``ConfigfsRoceTos`` over a plain directory tree (a simulated host,
    tests): ``mkdir`` of a group also makes the ``ports/<n>/default_roce_tos``
    files configfs would show, and removing it removes them."""

    def _make_group(self, group: Path) -> None:
        group.mkdir()
        dev = group.name
        for port in sorted(
            p.name
            for p in self.root.glob(f"bus/pci/devices/*/infiniband/{dev}/ports/*")
        ):
            tos = group / "ports" / port / "default_roce_tos"
            tos.parent.mkdir(parents=True)
            tos.write_text("0\n")

    def _remove_group(self, group: Path) -> None:
        shutil.rmtree(group)


def lab_deps(lab_dir: Path | str, env: Mapping[str, str]) -> Deps:
    """The plugins' deps on the simulated host at ``lab_dir``."""
    from railyard_sim import kernel_seams
    from railyard_sim.recording import RecordingRdmaOps, RecordingVfOps

    lab = Path(lab_dir)
    sysfs = SimSysfs(lab)
    seams = kernel_seams.enabled(lab)
    vf: VfOps = RecordingVfOps(lab)
    if "vf" in seams:
        vf = kernel_seams.LabKernelVfOps(lab, sysfs)
    # None: the production NETLINK_RDMA adapter, built at its first use.
    rdma = None if seams.get("rdma") else RecordingRdmaOps(lab)
    log.warning(
        "SIMULATED HOST %s: sysfs under sys/, VF ops %s, RDMA ops %s",
        lab,
        "the kernel's (netdevsim PFs)" if "vf" in seams else "recorded",
        "the kernel's" if rdma is None else "recorded",
    )
    return real_deps(
        env,
        sysfs=sysfs,
        vf=vf,
        rdma=rdma,
        roce=LabRoceTos(lab / SYS_DIR),
        default_state_dir=lab / STATE_DIR,
    )


def deps_factory(lab_dir: Path | str) -> DepsFactory:
    """A ``DepsFactory`` for ``plugin_funcs``: ``lab_deps`` of each command."""
    lab = Path(lab_dir)

    def make(args: CmdArgs) -> Deps:
        return lab_deps(lab, args.env)

    return make
