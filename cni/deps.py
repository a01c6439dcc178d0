# SPDX-License-Identifier: Apache-2.0
"""The one place that builds a plugin's dependencies (the AWS VPC CNI split).

``cmd_add(args)`` calls ``real_deps(env)`` and hands the result to the domain
function; tests build a ``Deps`` of their own. Adapters are imported inside
``real_deps`` so that VERSION and config errors never load pyroute2 or grpc.

The simulated host is an explicit product mode, not a hidden backdoor: when
``RAILYARD_SIM_ROOT`` names a lab directory that carries the lab's marker file,
sysfs is read under ``<lab>/sys`` and the PF-side VF settings, GUIDs and RDMA
netlink go to the recording seam in ``railyard_sim.recording``. Every other line
(links, netns, probes, locks, caches, IPAM) is the production path. A WARNING is
logged on every call so a node never runs simulated by accident.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cni.kernel import DeviceWaiter, Links, Netns, Probes, RdmaOps, VfOps
    from cni.kernel.sysfs import Sysfs

log = logging.getLogger(__name__)

SIM_ROOT_ENV = "RAILYARD_SIM_ROOT"
SIM_MARKER = "railyard-sim.marker"
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

    def close(self) -> None:
        self.links.close()


def sim_root(env: Mapping[str, str]) -> Path | None:
    """The lab directory when the simulated host is selected and real, else None."""
    raw = env.get(SIM_ROOT_ENV, "")
    if not raw:
        return None
    root = Path(raw)
    if not (root / SIM_MARKER).is_file():
        log.warning(
            "%s=%s ignored: no %s in it; using the real host",
            SIM_ROOT_ENV,
            raw,
            SIM_MARKER,
        )
        return None
    return root


def state_dir(env: Mapping[str, str]) -> Path:
    raw = env.get(STATE_DIR_ENV, "")
    if raw:
        return Path(raw)
    lab = sim_root(env)
    return lab / "state" if lab else DEFAULT_STATE_DIR


def real_deps(env: Mapping[str, str] | None = None) -> Deps:
    """Build the production dependencies, or the simulated host's (see module doc)."""
    env = os.environ if env is None else env
    from cni.kernel.links import PyRoute2Links
    from cni.kernel.netns import Namespaces
    from cni.kernel.probes import RawProbes
    from cni.kernel.sysfs import Sysfs
    from cni.kernel.udev import UdevWaiter

    lab = sim_root(env)
    if lab is not None:
        log.warning("SIMULATED HOST: sysfs under %s/sys, VF/RDMA ops recorded", lab)
        from railyard_sim.recording import RecordingRdmaOps, RecordingVfOps

        sysfs = Sysfs(root=lab / "sys")
        vf: VfOps = RecordingVfOps(lab)
        rdma: RdmaOps = RecordingRdmaOps(lab)
    else:
        from cni.kernel.rdma import NetlinkRdmaOps
        from cni.kernel.vf import PyRoute2VfOps

        sysfs = Sysfs()
        vf = PyRoute2VfOps(sysfs)
        rdma = NetlinkRdmaOps()
    return Deps(
        links=PyRoute2Links(),
        netns=Namespaces(),
        probes=RawProbes(),
        vf=vf,
        rdma=rdma,
        waiter=UdevWaiter(sysfs),
        sysfs=sysfs,
        state_dir=state_dir(env),
    )
