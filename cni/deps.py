# SPDX-License-Identifier: Apache-2.0
"""The one place that builds a plugin's dependencies (the AWS VPC CNI split).

A plugin's commands get their ``Deps`` from a factory (``DepsFactory``); the
default one, ``default_deps``, builds the production adapters with
``real_deps(env)``. Tests and the simulated host pass a factory of their own
(constructor injection, as rdma-cni's main does), so this module knows no
other host than the real one. Adapters are imported inside ``real_deps`` so
that VERSION and config errors never load pyroute2 or grpc.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cni.kernel import (
        DeviceWaiter,
        Links,
        Netns,
        NetnsPath,
        Probes,
        RdmaOps,
        RoceTos,
        VfOps,
    )
    from cni.kernel.sysfs import Sysfs
    from cni.record.store import AttachmentRecords
    from cni.skel import CmdArgs

STATE_DIR_ENV = "RAILYARD_STATE_DIR"
DEFAULT_STATE_DIR = Path("/var/lib/cni/railyard")


@dataclass(frozen=True, slots=True)
class Deps:
    """Everything a plugin command touches outside its own process memory."""

    links: Links
    netns: Netns
    probes: Probes
    vf: VfOps
    rdma: RdmaOps
    waiter: DeviceWaiter
    sysfs: Sysfs
    state_dir: Path  # caches and locks live below it
    roce: RoceTos | None = None  # None: configfs and sysfs under sysfs.root

    @property
    def roce_tos(self) -> RoceTos:
        """The RoCE TOS seam (built on first use: only ``roceTos`` needs it)."""
        if self.roce is not None:
            return self.roce
        from cni.kernel.roce import ConfigfsRoceTos

        return ConfigfsRoceTos(self.sysfs.root)

    @property
    def records(self) -> AttachmentRecords:
        """The attachment records under ``state_dir``, every plugin's way to them.

        Imported on first use, so VERSION and config errors never load them.
        """
        from cni.record.store import AttachmentRecords

        return AttachmentRecords(self.state_dir)

    def close(self) -> None:
        self.links.close()


#: Builds the deps of one command from its arguments (env included).
DepsFactory = Callable[["CmdArgs"], Deps]


def state_dir(env: Mapping[str, str], default: Path = DEFAULT_STATE_DIR) -> Path:
    """``RAILYARD_STATE_DIR`` when set, else ``default``."""
    raw = env.get(STATE_DIR_ENV, "")
    return Path(raw) if raw else default


def real_deps(
    env: Mapping[str, str] | None = None,
    *,
    sysfs: Sysfs | None = None,
    vf: VfOps | None = None,
    rdma: RdmaOps | None = None,
    roce: RoceTos | None = None,
    default_state_dir: Path = DEFAULT_STATE_DIR,
) -> Deps:
    """The production adapters; a caller may inject its own sysfs, VF or RDMA ops.

    Links, netns, probes, udev, locks and caches are always the real ones.
    """
    env = os.environ if env is None else env
    from cni.kernel.links import NetlinkLinks
    from cni.kernel.netns import Namespaces
    from cni.kernel.probes import RawProbes
    from cni.kernel.udev import UdevWaiter

    if sysfs is None:
        from cni.kernel.sysfs import Sysfs

        sysfs = Sysfs()
    if vf is None:
        from cni.kernel.vf import NetlinkVfOps

        vf = NetlinkVfOps(sysfs)
    if rdma is None:
        rdma = RdmaOnFirstUse()
    links = NetlinkLinks()
    return Deps(
        links=links,
        netns=Namespaces(links),
        probes=RawProbes(),
        vf=vf,
        rdma=rdma,
        waiter=UdevWaiter(sysfs),
        sysfs=sysfs,
        state_dir=state_dir(env, default_state_dir),
        roce=roce,
    )


class RdmaOnFirstUse:
    """``RdmaOps`` that loads the NETLINK_RDMA adapter when a command first asks.

    The adapter is built on pyroute2's netlink core, and importing it loads the
    whole pyroute2 package (~150 ms). Most commands never move an RDMA device
    (a VF without RDMA isolation, its DEL), so they must not pay for it.
    """

    def __init__(self) -> None:
        self._ops: RdmaOps | None = None

    def _loaded(self) -> RdmaOps:
        if self._ops is None:
            from cni.kernel.rdma import NetlinkRdmaOps

            self._ops = NetlinkRdmaOps()
        return self._ops

    def netns_mode(self) -> str:
        return self._loaded().netns_mode()

    def devices(self, netns: NetnsPath = None) -> list[str]:
        return self._loaded().devices(netns)

    def move(self, dev: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        self._loaded().move(dev, to_netns, netns)

    def rename(self, dev: str, new_name: str, netns: NetnsPath = None) -> None:
        self._loaded().rename(dev, new_name, netns)


def default_deps(args: CmdArgs) -> Deps:
    """The production ``DepsFactory``: ``real_deps`` over the command's env."""
    return real_deps(args.env)
