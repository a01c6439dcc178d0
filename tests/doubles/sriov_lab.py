# SPDX-License-Identifier: Apache-2.0
"""The VF plugins' test harness on the simulated host: a Lab, pods, netconfs,
read-backs.

Used by the sriov, ib-sriov and rdma kernel/integration tests and the
benchmark. ``Harness`` owns one ``railyard_sim.lab.Lab`` (veth VFs - IPoIB ones on
IB rails -, fabric netns with gateways, fake PCI tree with RDMA devices), a
tmp state dir and a ``FakeIpam`` holding the lab's pools; ``deps()`` builds
the production dependencies for the lab (``railyard_sim.host.lab_deps``), with
optional ``FaultProxy`` wrappers or another ``VfOps`` (``tests.doubles.
sim_faults``). Every pod netns is a lab netns, so ``Lab.down()`` removes it
whatever the test did.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cni.deps import Deps
from cni.skel import CmdArgs, PluginFuncs
from railyard_sim.host import lab_deps
from railyard_sim.lab import Lab, RailSpec, VfSpec, ip_json
from railyard_sim.recording import RecordingVfOps
from tests.doubles.fake_ipam import FakeIpam, FakePool
from tests.doubles.faults import FaultProxy

CNI_PATH = "/usr/lib/cni"
GUID = "02:00:00:00:00:00:00:11"


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
        self.extra_env: dict[str, str] = {"RAILYARD_IB_REBIND_TIMEOUT": "10"}

    @classmethod
    @contextmanager
    def up(
        cls, root: Path, rails: int = 1, vfs_per_pf: int = 2, ib_rails: int = 0
    ) -> Iterator[Harness]:
        """``rails`` RoCE rails, then ``ib_rails`` InfiniBand ones."""
        with Lab.up(
            root / "lab", rails=rails, vfs_per_pf=vfs_per_pf, ib_rails=ib_rails
        ) as lab:
            yield cls(lab, root)

    # --------------------------------------------------------------- env

    @property
    def env(self) -> dict[str, str]:
        return {
            "RAILYARD_STATE_DIR": str(self.state_dir),
            "CNI_PATH": CNI_PATH,
            "RAILYARD_NODE_NAME": "node1",
            **self.extra_env,
        }

    def deps(self, *, faulty: bool = False, vf: RecordingVfOps | None = None) -> Deps:
        """Real deps for the lab; with ``faulty`` the links/probes are proxied,
        with ``vf`` the PF-side ops are that double."""
        deps = lab_deps(self.lab.dir, self.env)
        if vf is not None:
            deps = dataclasses.replace(deps, vf=vf)
        if not faulty:
            return deps
        self.links = FaultProxy(deps.links)
        self.probes = FaultProxy(deps.probes)
        return dataclasses.replace(deps, links=self.links, probes=self.probes)

    def funcs(self, commands: Any, deps: Deps | None = None) -> PluginFuncs:
        """A plugin's commands (``commands.plugin_funcs``) on this lab with the
        FakeIpam: with ``deps`` (closed after one command), else fresh lab
        deps for each command."""
        make_deps = (lambda _a: deps) if deps is not None else (lambda _a: self.deps())
        funcs: PluginFuncs = commands.plugin_funcs(make_deps, self.ipam_factory)
        return funcs

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

    def ib_rail(self, n: int = 1) -> RailSpec:
        """The ``n``-th InfiniBand rail."""
        return [r for r in self.lab.rails if r.kind == "ib"][n - 1]

    def roce_rail(self, n: int = 1) -> RailSpec:
        return [r for r in self.lab.rails if r.kind == "roce"][n - 1]

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

    # ------------------------------------------------------- read-backs

    def guids(self, rail: RailSpec, vf: VfSpec) -> tuple[str | None, str | None]:
        """The VF's (node, port) GUID on its PF, from the recording state."""
        info = RecordingVfOps(self.lab.dir).get_vf(rail.pf_netdev, vf.index)
        return info.node_guid, info.port_guid

    def state_files(self) -> list[str]:
        """Every record left under the state dir.

        Locks are excluded: they describe devices, not pods.
        """
        if not self.state_dir.exists():
            return []
        return sorted(
            str(p.relative_to(self.state_dir))
            for p in self.state_dir.rglob("*")
            if p.is_file() and p.parent.name != "locks"
        )


# ------------------------------------------------------------ read-backs


def netns_name(path: str) -> str:
    return Path(path).name


def link(name: str, netns: str | None = None) -> dict[str, Any] | None:
    """``ip -j -d link show dev <name>`` (in ``netns``), or None."""
    out = ip_json(
        ["-d", "link", "show", "dev", name], netns=netns_name(netns) if netns else None
    )
    return out[0] if out else None  # type: ignore[return-value]


def host_links() -> list[str]:
    return [str(x["ifname"]) for x in ip_json(["link", "show"])]


def pod_links(netns: str) -> list[str]:
    return [
        str(x["ifname"]) for x in ip_json(["link", "show"], netns=netns_name(netns))
    ]


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
    return dataclasses.asdict(RecordingVfOps(lab.dir).get_vf(pf, vf))
