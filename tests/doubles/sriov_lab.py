# SPDX-License-Identifier: Apache-2.0
"""A sriov test harness on the simulated host: a Lab, pods, netconfs, read-backs.

Used by the sriov kernel/integration tests and the benchmark. ``Harness``
owns one ``cni.sim.lab.Lab`` (veth VFs, fabric netns with gateways, fake PCI
tree), a tmp state dir and a ``FakeIpam`` holding the lab's pools; ``deps()``
builds the production dependencies for the lab (``RAILYARD_SIM_ROOT``), with
optional ``FaultProxy`` wrappers. Every pod netns is a lab netns, so
``Lab.down()`` removes it whatever the test did.
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
from cni.sim.lab import Lab, RailSpec, VfSpec, ip_json
from cni.skel import CmdArgs
from tests.doubles.fake_ipam import FakeIpam, FakePool
from tests.doubles.faults import FaultProxy

CNI_PATH = "/usr/lib/cni"


class Harness:
    def __init__(self, lab: Lab, root: Path) -> None:
        self.lab = lab
        self.root = root
        self.state_dir = root / "state"
        self.ipam = FakeIpam()
        for r in lab.rails:
            v4_first, v4_last = r.range_v4.split("-")
            v6_first, v6_last = r.range_v6.split("-")
            self.ipam.add_pool(
                FakePool(r.pool_v4, r.subnet_v4, v4_first, v4_last, r.gateway_v4)
            )
            self.ipam.add_pool(
                FakePool(r.pool_v6, r.subnet_v6, v6_first, v6_last, r.gateway_v6)
            )
        self._pods = 0
        self.links: FaultProxy | None = None
        self.probes: FaultProxy | None = None

    @classmethod
    @contextmanager
    def up(cls, root: Path, rails: int = 1, vfs_per_pf: int = 2) -> Iterator[Harness]:
        with Lab.up(root / "lab", rails=rails, vfs_per_pf=vfs_per_pf) as lab:
            yield cls(lab, root)

    # --------------------------------------------------------------- env

    @property
    def env(self) -> dict[str, str]:
        return {
            **self.lab.env(),
            "RAILYARD_STATE_DIR": str(self.state_dir),
            "CNI_PATH": CNI_PATH,
            "RAILYARD_NODE_NAME": "node1",
        }

    def deps(self, faulty: bool = False) -> Deps:
        """Real deps for the lab; with ``faulty`` the links/probes are proxied."""
        deps = real_deps(self.env)
        if not faulty:
            return deps
        self.links = FaultProxy(deps.links)
        self.probes = FaultProxy(deps.probes)
        return dataclasses.replace(deps, links=self.links, probes=self.probes)

    def pod(self) -> str:
        """A fresh pod netns (lab-owned); its /var/run/netns path."""
        self._pods += 1
        name = self.lab.netns_name(f"pod{self._pods}")
        subprocess.run(["ip", "netns", "add", name], check=True)
        return f"/var/run/netns/{name}"

    def rail(self, n: int = 1) -> RailSpec:
        return self.lab.rail(n)

    def vf(self, rail: int = 1, index: int = 0) -> VfSpec:
        return self.lab.rail(rail).vfs[index]

    # ----------------------------------------------------------- configs

    def conf(
        self, rail: int = 1, index: int = 0, v6: bool = False, **extra: Any
    ) -> dict[str, Any]:
        r = self.rail(rail)
        ipam: dict[str, Any] = {"type": "railyard", "default_ipv4_ippool": [r.pool_v4]}
        if v6:
            ipam["default_ipv6_ippool"] = [r.pool_v6]
        out: dict[str, Any] = {
            "cniVersion": "1.0.0",
            "name": f"gpu{rail}-sriov",
            "type": "sriov",
            "deviceID": r.vfs[index].pci,
            "ipam": ipam,
        }
        out.update(extra)
        return out

    def args(
        self,
        command: str,
        conf: dict[str, Any],
        netns: str,
        ifname: str = "net1",
        container_id: str = "c1",
        cni_args: str = "",
    ) -> CmdArgs:
        return CmdArgs(
            command=command,
            container_id=container_id,
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


# ------------------------------------------------------------ read-backs


def netns_name(path: str) -> str:
    return Path(path).name


def link(name: str, netns: str | None = None) -> dict[str, Any] | None:
    """``ip -j -d link show dev <name>`` (in ``netns``), or None."""
    out = ip_json(
        ["-d", "link", "show", "dev", name], netns=netns_name(netns) if netns else None
    )
    return out[0] if out else None  # type: ignore[return-value]


def addresses(name: str, netns: str) -> list[str]:
    out = ip_json(["addr", "show", "dev", name], netns=netns_name(netns))
    if not out:
        return []
    return [
        f"{a['local']}/{a['prefixlen']}"
        for a in out[0].get("addr_info", [])  # type: ignore[union-attr]
        if a.get("scope") == "global"
    ]


def rules(netns: str, family: str = "-4") -> list[dict[str, Any]]:
    return ip_json([family, "rule", "show"], netns=netns_name(netns))  # type: ignore[return-value]


def routes(netns: str, table: str, family: str = "-4") -> list[dict[str, Any]]:
    return ip_json(  # type: ignore[return-value]
        [family, "route", "show", "table", table], netns=netns_name(netns)
    )


def vf_table(lab: Lab, pf: str, vf: int) -> dict[str, Any]:
    """The recorded PF-side VF entry (what ``ip link show <pf>`` would list)."""
    from cni.sim.recording import RecordingVfOps

    return dataclasses.asdict(RecordingVfOps(lab.dir).get_vf(pf, vf))
