# SPDX-License-Identifier: Apache-2.0
"""An InfiniBand test harness on the simulated host (rdma and ib-sriov tests).

``IbHarness`` owns a ``cni.sim.lab.Lab`` with RoCE and IB rails (IPoIB VFs are
veth stand-ins, RDMA devices live in the fake PCI tree, GUIDs, rebinds and the
RDMA netns mode go through the recording seam), a tmp state dir and a
``FakeIpam`` holding the lab's pools. ``deps()`` builds the production
dependencies of the lab (``RAILYARD_SIM_ROOT``). Every pod netns is a lab
netns, so ``Lab.down()`` removes it whatever the test did.

``UnbindOnlyVfOps`` is the fault the recording seam has no knob for: a rebind
that unbinds the VF but never binds it again, so its netdev never comes back.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cni.deps import Deps, real_deps
from cni.sim.lab import Lab, RailSpec, VfSpec, ip_json, run_ip
from cni.sim.recording import RecordingVfOps, read_state, vf_table
from cni.skel import CmdArgs
from tests.doubles.fake_ipam import FakeIpam, FakePool

CNI_PATH = "/usr/lib/cni"
GUID = "02:00:00:00:00:00:00:11"


class UnbindOnlyVfOps(RecordingVfOps):
    """``RecordingVfOps`` whose next ``failing`` rebinds only unbind the VF."""

    def __init__(self, lab_dir: Path, failing: int = 1) -> None:
        super().__init__(lab_dir)
        self.failing = failing
        self.unbound: list[str] = []

    def rebind(self, pci: str) -> None:
        if self.failing <= 0:
            super().rebind(pci)
            return
        self.failing -= 1
        port = read_state(self.lab)["ports"][pci]
        # Deleting the fabric-side peer destroys the stand-in wherever it is.
        run_ip(
            ["link", "del", "dev", port["peer"]],
            netns=port["fabric_netns"],
            check=False,
        )
        from cni.sim.pci_tree import PciTree

        PciTree(self.lab / "sys").remove_netdev(pci)
        self.unbound.append(pci)


class IbHarness:
    def __init__(self, lab: Lab, root: Path) -> None:
        self.lab = lab
        self.root = root
        self.state_dir = root / "state"
        self.ipam = FakeIpam()
        for r in lab.rails:
            first, last = r.range_v4.split("-")
            self.ipam.add_pool(
                FakePool(r.pool_v4, r.subnet_v4, first, last, r.gateway_v4)
            )
        self._pods = 0
        self.extra_env: dict[str, str] = {"RAILYARD_IB_REBIND_TIMEOUT": "10"}

    @classmethod
    @contextmanager
    def up(
        cls, root: Path, rails: int = 1, ib_rails: int = 1, vfs_per_pf: int = 2
    ) -> Iterator[IbHarness]:
        with Lab.up(
            root / "lab", rails=rails, vfs_per_pf=vfs_per_pf, ib_rails=ib_rails
        ) as lab:
            yield cls(lab, root)

    @property
    def env(self) -> dict[str, str]:
        return {
            **self.lab.env(),
            "RAILYARD_STATE_DIR": str(self.state_dir),
            "CNI_PATH": CNI_PATH,
            "RAILYARD_NODE_NAME": "node1",
            **self.extra_env,
        }

    def deps(self, vf: RecordingVfOps | None = None) -> Deps:
        deps = real_deps(self.env)
        return deps if vf is None else dataclasses.replace(deps, vf=vf)

    def pod(self) -> str:
        self._pods += 1
        name = self.lab.netns_name(f"pod{self._pods}")
        subprocess.run(["ip", "netns", "add", name], check=True)
        return f"/var/run/netns/{name}"

    def ib_rail(self, n: int = 1) -> RailSpec:
        return [r for r in self.lab.rails if r.kind == "ib"][n - 1]

    def roce_rail(self, n: int = 1) -> RailSpec:
        return [r for r in self.lab.rails if r.kind == "roce"][n - 1]

    def ib_conf(
        self, vf: VfSpec, rail: RailSpec, ipam: bool = True, **extra: Any
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cniVersion": "1.0.0",
            "name": f"ib{rail.number}",
            "type": "ib-sriov",
            "deviceID": vf.pci,
        }
        if ipam:
            out["ipam"] = {"type": "railyard", "default_ipv4_ippool": [rail.pool_v4]}
        out.update(extra)
        return out

    def args(
        self,
        command: str,
        conf: dict[str, Any],
        netns: str,
        ifname: str = "net1",
        cid: str = "c1",
        cni_args: str = "",
    ) -> CmdArgs:
        return CmdArgs(
            command=command,
            container_id=cid,
            netns=netns,
            ifname=ifname,
            args=cni_args,
            path=[CNI_PATH],
            stdin_data=json.dumps(conf).encode(),
            netconf=conf,
            env=self.env,
        )

    def ipam_factory(self, netconf: Any, env: Any) -> FakeIpam | None:
        return self.ipam if netconf.get("ipam") else None

    def guids(self, rail: RailSpec, vf: VfSpec) -> tuple[str | None, str | None]:
        info = vf_table(self.lab.dir, rail.pf_netdev)[vf.index]
        return info.node_guid, info.port_guid

    def state_files(self) -> list[str]:
        """Every record left under the state dir (locks excluded)."""
        if not self.state_dir.exists():
            return []
        return sorted(
            str(p.relative_to(self.state_dir))
            for p in self.state_dir.rglob("*")
            if p.is_file() and p.parent.name not in ("locks",)
        )


def host_link(name: str) -> dict[str, Any] | None:
    out = ip_json(["link", "show", "dev", name])
    return out[0] if out else None  # type: ignore[return-value]


def pod_links(netns: str) -> list[str]:
    return [str(x["ifname"]) for x in ip_json(["link", "show"], netns=Path(netns).name)]
