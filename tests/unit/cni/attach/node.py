# SPDX-License-Identifier: Apache-2.0
"""A GPU node on the fake kernel: rails, pods, netconfs, and the plugins' entries.

``Node`` owns a ``FakeKernel`` (one RoCE rail and one InfiniBand rail, two
VFs each, an RDMA device per VF), a ``FakeIpam`` with each rail's pools and a
tmp state dir. ``add``/``delete``/``check``/``gc`` run a plugin command the
way ``cni.skel`` would, with the fake kernel as its ``Deps``: this module is
the one place that knows the plugins' command signatures and the state dir
layout, so the tests read as behaviour and survive a reshaping of either.
``run`` goes through the plugin's real entry instead (``cni.skel.run_plugin``),
for what the runtime reads: the error JSON's code and message.

``snapshot(vf)`` is everything ADD records about a VF and DEL must put back:
the netdev's netns, name, MAC and MTU, the PF's VF entry (MAC, VLAN, QoS,
spoofchk, trust, link state, rates, GUIDs) and the RDMA device's netns.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cni.errors import CniError
from cni.ipam import Attachment
from cni.kernel import NetnsPath, RouteSpec, VfInfo
from cni.plugins.registry import plugin
from cni.skel import CmdArgs, PluginFuncs, run_plugin
from tests.doubles.fake_ipam import FakeIpam, FakePool
from tests.doubles.fake_kernel import FakeKernel

GUID = "02:00:00:00:00:00:aa:01"


@dataclass(frozen=True)
class Vf:
    pci: str
    pf_pci: str
    pf: str
    index: int
    netdev: str
    rdma: str
    ib: bool = False


@dataclass(frozen=True)
class Rail:
    pf_pci: str
    pf: str
    pool_v4: str
    pool_v6: str
    gateway_v4: str
    gateway_v6: str
    vfs: tuple[Vf, ...]


@dataclass(frozen=True)
class Snapshot:
    """A VF as the host sees it (see the module doc)."""

    netns: NetnsPath
    name: str
    mac: str
    mtu: int
    vf: VfInfo
    rdma_netns: NetnsPath


class Node:
    def __init__(self, root: Path, rdma_mode: str = "exclusive") -> None:
        self.kernel = FakeKernel(rdma_mode=rdma_mode)
        self.ipam = FakeIpam()
        self.state_dir = root / "state"
        self.env = {
            "RAILYARD_STATE_DIR": str(self.state_dir),
            "RAILYARD_IB_REBIND_TIMEOUT": "1",
            "RAILYARD_NODE_NAME": "node1",
        }
        self._pods = 0
        self.roce = self._rail(1, "0000:af:00", "ens1f0", ib=False)
        self.ib = self._rail(2, "0000:b0:00", "ibp1s0", ib=True)

    def _rail(self, n: int, bus: str, pf: str, ib: bool) -> Rail:
        pf_pci = f"{bus}.0"
        self.kernel.add_pf(pf_pci, pf, mtu=9000 if not ib else 4092, ib=ib)
        vfs = []
        for index in range(2):
            pci = f"{bus}.{index + 2}"
            netdev = f"{pf}v{index}"
            rdma_dev = f"mlx5_{n * 10 + index}"
            self.kernel.add_vf(
                pf_pci, index, pci, netdev, mtu=1500 if not ib else 2044, rdma=rdma_dev
            )
            vfs.append(Vf(pci, pf_pci, pf, index, netdev, rdma_dev, ib))
        gw4, gw6 = f"172.16.1{n}.254", f"fd00:{n}::fe"
        self.kernel.wire[gw4] = f"02:99:00:00:00:{n:02x}"
        self.kernel.wire[gw6] = f"02:99:00:00:01:{n:02x}"
        pool4, pool6 = f"rail{n}-v4", f"rail{n}-v6"
        self.ipam.add_pool(
            FakePool(
                pool4, f"172.16.1{n}.0/24", f"172.16.1{n}.1", f"172.16.1{n}.20", gw4
            )
        )
        self.ipam.add_pool(
            FakePool(pool6, f"fd00:{n}::/64", f"fd00:{n}::1", f"fd00:{n}::20", gw6)
        )
        return Rail(pf_pci, pf, pool4, pool6, gw4, gw6, tuple(vfs))

    # -------------------------------------------------------------- pods

    def pod(self) -> str:
        """A pod netns with the cluster NIC ``eth0`` and its default route."""
        self._pods += 1
        path = self.kernel.add_netns(f"/var/run/netns/pod{self._pods}")
        self.kernel.add_link("eth0", path, up=True)
        self.kernel.links.add_address("eth0", f"10.0.0.{self._pods}/24", path)
        self.kernel.links.add_route(
            RouteSpec(dst="0.0.0.0/0", gw="10.0.0.254", dev="eth0"), path
        )
        self.kernel.journal.clear()
        return path

    # ----------------------------------------------------------- configs

    def sriov_conf(
        self, vf: Vf | None = None, v6: bool = True, **extra: Any
    ) -> dict[str, Any]:
        vf = vf or self.roce.vfs[0]
        conf: dict[str, Any] = {
            "cniVersion": "1.0.0",
            "name": "rail1",
            "type": "sriov",
            "deviceID": vf.pci,
            "ipam": self._ipam(self.roce, v6),
        }
        conf.update(extra)
        return conf

    def ib_conf(self, vf: Vf | None = None, **extra: Any) -> dict[str, Any]:
        vf = vf or self.ib.vfs[0]
        conf: dict[str, Any] = {
            "cniVersion": "1.0.0",
            "name": "ib2",
            "type": "ib-sriov",
            "deviceID": vf.pci,
            "ipam": self._ipam(self.ib, v6=False),
            "runtimeConfig": {"infinibandGUID": GUID},
        }
        conf.update(extra)
        return conf

    def rdma_conf(self, vf: Vf | None = None) -> dict[str, Any]:
        vf = vf or self.roce.vfs[0]
        return {
            "cniVersion": "1.0.0",
            "name": "rail1",
            "type": "rdma",
            "deviceID": vf.pci,
            "prevResult": {
                "cniVersion": "1.0.0",
                "interfaces": [
                    {"name": "net1", "sandbox": "/x", "mac": "02:00:00:00:00:01"}
                ],
            },
        }

    @staticmethod
    def _ipam(rail: Rail, v6: bool) -> dict[str, Any]:
        ipam: dict[str, Any] = {
            "type": "railyard",
            "default_ipv4_ippool": [rail.pool_v4],
        }
        if v6:
            ipam["default_ipv6_ippool"] = [rail.pool_v6]
        return ipam

    # ---------------------------------------------------------- commands

    def args(
        self,
        command: str,
        conf: dict[str, Any],
        netns: str,
        ifname: str = "net1",
        container_id: str = "c1",
    ) -> CmdArgs:
        return CmdArgs(
            command=command,
            container_id=container_id,
            netns=netns,
            ifname=ifname,
            stdin_data=json.dumps(conf).encode(),
            netconf=conf,
            env=self.env,
        )

    def _ipam_factory(self, netconf: Any, env: Any) -> FakeIpam | None:
        return self.ipam if netconf.get("ipam") else None

    def funcs(self, conf: dict[str, Any]) -> PluginFuncs:
        """The plugin of ``conf["type"]`` over this node's kernel and IPAM."""
        return plugin(conf["type"]).funcs(
            lambda _ca: self.kernel.deps(self.state_dir), self._ipam_factory
        )

    def _run(self, command: str, conf: dict[str, Any], netns: str, **kw: Any) -> Any:
        funcs = self.funcs(conf)
        fn = {"ADD": funcs.add, "DEL": funcs.del_, "CHECK": funcs.check}[command]
        return fn(self.args(command, conf, netns, **kw))

    def run(self, command: str, conf: dict[str, Any], netns: str) -> None:
        """``command`` through the plugin's real entry (``cni.skel.run_plugin``,
        env and stdin as a runtime passes them); its error JSON is raised as
        the ``CniError`` it carries."""
        env = {
            **self.env,
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": "c1",
            "CNI_NETNS": netns,
            "CNI_IFNAME": "net1",
            "CNI_PATH": "/opt/cni/bin",
        }
        out = io.StringIO()
        code = run_plugin(
            self.funcs(conf),
            conf["type"],
            env=env,
            stdin=io.BytesIO(json.dumps(conf).encode()),
            stdout=out,
            stderr=io.StringIO(),
            deadline_seconds=None,
            netns=self.kernel.netns,
        )
        if code != 0:
            doc = json.loads(out.getvalue())
            raise CniError(doc["code"], doc["msg"], doc.get("details", ""))

    def add(self, conf: dict[str, Any], netns: str, **kw: Any) -> Any:
        return self._run("ADD", conf, netns, **kw)

    def delete(self, conf: dict[str, Any], netns: str, **kw: Any) -> None:
        self._run("DEL", conf, netns, **kw)

    def check(self, conf: dict[str, Any], netns: str, **kw: Any) -> None:
        self._run("CHECK", conf, netns, **kw)

    def gc(self, conf: dict[str, Any], valid: list[tuple[str, str]]) -> None:
        """GC with the attachments (container ID, ifname) the runtime holds."""
        ca = self.args("GC", conf, "")
        ca.valid_attachments = [Attachment(cid, ifname) for cid, ifname in valid]
        self.funcs(conf).gc(ca)

    # ------------------------------------------------------- read-backs

    def snapshot(self, vf: Vf) -> Snapshot:
        found = self.kernel.where_is(vf.pci)
        assert found is not None, f"VF {vf.pci} has no netdev anywhere"
        netns, link = found
        return Snapshot(
            netns=netns,
            name=link.name,
            mac=link.mac,
            mtu=link.mtu,
            vf=self.kernel.vf_info(vf.pf_pci, vf.index),
            rdma_netns=self.kernel.rdma_netns(vf.rdma),
        )

    def records_of(self, container_id: str, pci: str) -> list[str]:
        """``records()`` that belong to one attachment or its VF."""
        return [
            r
            for r in self.records()
            if Path(r).name.startswith(f"{container_id}-") or Path(r).name == pci
        ]

    def records(self) -> list[str]:
        """Every per-attachment or per-VF file left in the state dir.

        Locks describe no attachment and are left by design; everything
        else (attachment records, allocation markers) must be gone once an
        attachment is fully undone.
        """
        if not self.state_dir.exists():
            return []
        return sorted(
            str(p.relative_to(self.state_dir))
            for p in self.state_dir.rglob("*")
            if p.is_file() and "locks" not in p.relative_to(self.state_dir).parts
        )
