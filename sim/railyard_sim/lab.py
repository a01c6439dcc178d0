# SPDX-License-Identifier: Apache-2.0
"""The simulated host: rails of veth "VFs", fabric netns with gateways, a fake PCI tree.

``Lab.up(dir, rails=..., vfs_per_pf=..., ib_rails=...)`` builds, in the *caller's*
network namespace (the "host"):

- per rail, a fabric netns ``rs<id>f<N>`` whose bridge ``br0`` holds the rail's
  gateways (172.16.1N.254/24 and fd00:1N::fe/64, N = 10 + rail number);
- a PF stand-in ``rs<id>p<N>`` (veth, MTU 9000) whose peer is a bridge port;
- ``vfs_per_pf`` VF stand-ins ``rs<id>r<N>v<i>`` (veth ends left down in the host,
  peers enslaved to the bridge, as a real VF sits behind the NIC's e-switch);
- ``<dir>/sys``: the fake PCI tree naming those netdevs, with one RDMA device
  ``mlx5_K`` per function; IB rails have the same shape with kind "ib";
- ``<dir>/lab.json`` (manifest), ``<dir>/railyard-sim.marker`` (what tells a lab
  directory from any other: ``down`` refuses a directory without it),
  ``<dir>/pools.yaml`` (SpiderIPPool v2beta1), the recording state of
  ``railyard_sim.recording`` and ``<dir>/cni-bin``, the plugins' launchers on
  this host (``railyard_sim.launchers``: put it in a runtime's CNI_PATH).

``<id>`` is a short per-lab id so several labs coexist on one machine. ``down()``
removes every netns, link, file and ipamd process the lab made, also for a
half-built lab.

Imports: standard library only at module level (the launchers' plugins import this
module through ``railyard_sim.recording``); PyYAML is never needed here.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from railyard_sim.pci_tree import CLASS_ETHERNET, CLASS_INFINIBAND, PciTree

PREFIX = "rs"
MANIFEST = "lab.json"
SIM_MARKER = "railyard-sim.marker"
BIN_DIR = "cni-bin"
POOLS = "pools.yaml"
SYS_DIR = "sys"
NETNS_RUN_DIRS = (Path("/var/run/netns"), Path("/run/netns"))
PF_MTU = 9000
MAX_RAILS = 15  # PCI buses 0x10..0xf0, one per rail
BRIDGE = "br0"


class LabError(RuntimeError):
    """A lab command failed; the message carries the command and its stderr."""


# ----------------------------------------------------------------- commands


def run_ip(
    args: Sequence[str],
    netns: str | None = None,
    batch: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run iproute2's ``ip`` (optionally ``-n <netns>``, optionally a batch)."""
    cmd = ["ip"]
    if netns:
        cmd += ["-n", netns]
    if batch is not None:
        cmd += ["-batch", "-"]
    cmd += list(args)
    proc = subprocess.run(cmd, input=batch, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        shown = " ".join(cmd) + (f" <<{batch!r}" if batch else "")
        raise LabError(f"{shown}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def ip_json(args: Sequence[str], netns: str | None = None) -> list[dict[str, object]]:
    """``ip -j <args>`` parsed; an empty list when the object does not exist."""
    proc = run_ip(["-j", *args], netns=netns, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return []
    data = json.loads(proc.stdout)
    return data if isinstance(data, list) else []


def netns_names() -> list[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    return sorted(str(e["name"]) for e in ip_json(["netns", "list"]))


def link_names(netns: str | None = None) -> list[str]:
    return sorted(str(e["ifname"]) for e in ip_json(["link", "show"], netns=netns))


def veth_peer_name(netns: str, ifname: str) -> str | None:
    """The caller-netns name of the veth whose other end is ``ifname`` in ``netns``.

    A veth end reports its peer as (IFLA_LINK = the peer's ifindex, link netnsid
    = the peer's netns as seen from this end). The pair is identified from the
    caller's side: a veth here whose IFLA_LINK is that end's ifindex and whose
    link netnsid is the one this netns gave ``netns``. None when the other end is
    in another netns, or either end is gone.
    """
    end = ip_json(["link", "show", "dev", ifname], netns=netns)
    nsid = next(
        (e.get("id") for e in ip_json(["netns", "list"]) if e.get("name") == netns),
        None,
    )
    if not end or nsid is None:
        return None
    for link in ip_json(["link", "show", "type", "veth"]):
        if (
            link.get("ifindex") == end[0].get("link_index")
            and link.get("link_index") == end[0].get("ifindex")
            and link.get("link_netnsid") == nsid
        ):
            return str(link["ifname"])
    return None


def netns_identity(path: str | None = None) -> tuple[int, int]:
    """(st_dev, st_ino) of a netns path; None = the caller's own netns."""
    st = os.stat(path or "/proc/self/ns/net")
    return st.st_dev, st.st_ino


def netns_name_of(path: str) -> str | None:
    """The ``ip netns`` name of a ``/var/run/netns/<name>`` path (or a bare name)."""
    p = Path(path)
    if len(p.parts) == 1:
        return path
    if p.parent in NETNS_RUN_DIRS:
        return p.name
    return None


# ----------------------------------------------------------------- manifest


@dataclass(frozen=True, slots=True)
class VfSpec:
    index: int
    pci: str
    netdev: str  # the name the lab created; a rebind gives it another
    rdma: str
    peer: str  # its bridge port in the fabric netns


@dataclass(frozen=True, slots=True)
class RailSpec:
    number: int
    kind: str  # "roce" or "ib"
    fabric_netns: str
    bridge: str
    pf_pci: str
    pf_netdev: str
    pf_rdma: str
    pf_peer: str
    pf_mtu: int
    subnet_v4: str
    gateway_v4: str
    range_v4: str
    pool_v4: str
    subnet_v6: str
    gateway_v6: str
    range_v6: str
    pool_v6: str
    vfs: tuple[VfSpec, ...] = ()
    # The PF's own host address (CIDR), "" for none: a node's rail NIC has one
    # in its rail's subnet, which is how matchMasterSubnet picks the node's pool.
    pf_address_v4: str = ""

    @property
    def plugin_type(self) -> str:
        return "ib-sriov" if self.kind == "ib" else "sriov"


@dataclass(frozen=True, slots=True)
class Manifest:
    lab_id: str
    lab_dir: str
    host_netns: tuple[int, int]
    rails: tuple[RailSpec, ...] = field(default_factory=tuple)
    complete: bool = True
    shape: str = ""  # a railyard_sim.shapes name, "" for the flat tree

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Manifest:
        rails = []
        for r in raw.get("rails", []):
            vfs = tuple(VfSpec(**v) for v in r["vfs"])
            rails.append(RailSpec(**{**r, "vfs": vfs}))
        host = raw["host_netns"]
        return cls(
            lab_id=str(raw["lab_id"]),
            lab_dir=str(raw["lab_dir"]),
            host_netns=(int(host[0]), int(host[1])),
            rails=tuple(rails),
            complete=bool(raw.get("complete", True)),
            shape=str(raw.get("shape", "")),
        )


def is_lab_dir(path: Path | str) -> bool:
    """Whether ``path`` carries the lab marker (written before anything else)."""
    return (Path(path) / SIM_MARKER).is_file()


def load_manifest(lab_dir: Path | str) -> Manifest:
    path = Path(lab_dir) / MANIFEST
    try:
        return Manifest.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise LabError(f"{path}: no lab here (run `railyard-sim up` first)") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise LabError(f"{path}: not a lab manifest ({exc})") from None


def write_manifest(lab_dir: Path | str, manifest: Manifest) -> None:
    """Replace ``lab.json`` atomically: a reader never sees half a manifest."""
    path = Path(lab_dir) / MANIFEST
    tmp = path.with_name(f".{MANIFEST}.tmp{os.getpid()}")
    tmp.write_text(manifest.to_json())
    os.replace(tmp, path)


def _rail_names(lab_id: str, rail: int) -> tuple[str, str]:
    return f"{PREFIX}{lab_id}f{rail}", f"{PREFIX}{lab_id}p{rail}"


def _vf_pci(bus: int, index: int) -> str:
    # Functions 0 and 1 are the PF ports on a ConnectX card; VFs start at .2.
    devfn = 2 + index
    return f"0000:{bus:02x}:{devfn // 8:02x}.{devfn % 8}"


def plan(
    lab_id: str,
    lab_dir: Path,
    rails: int,
    vfs_per_pf: int,
    ib_rails: int,
    pf_mtu: int = PF_MTU,
    shape: str = "",
    rail_subnets: Sequence[str] = (),
) -> Manifest:
    """The lab's names and addresses, computed before anything is created.

    With a server ``shape`` (``railyard_sim.shapes``) the rails are its NICs,
    in its order, at its PCI addresses; ``rails`` must be their number.

    ``rail_subnets`` (one IPv4 CIDR per RoCE rail) models a node of a cluster
    whose rails take per-node subnets: rail N's fabric gateway is the subnet's
    first address and its PF holds the last one before the broadcast, as a
    node's rail NIC holds an address in its rail's subnet. Without it every
    rail has its cluster-wide /24 and the PFs have no address.
    """
    pf_addresses: list[str] = []
    if shape:
        from railyard_sim.shapes import shape as server_shape

        nics = server_shape(shape).nics
        if ib_rails or rails != len(nics):
            raise ValueError(
                f"shape {shape} has {len(nics)} RoCE NICs: it takes "
                f"--rails {len(nics)} and no --ib-rails"
            )
        pf_addresses = [nic.pci for nic in nics]
    total = rails + ib_rails
    if not 1 <= total <= MAX_RAILS:
        raise ValueError(f"rails + ib_rails must be 1..{MAX_RAILS}, got {total}")
    if rail_subnets and len(rail_subnets) != rails:
        raise ValueError(
            f"rail_subnets: one IPv4 subnet per RoCE rail ({rails}), "
            f"got {len(rail_subnets)}"
        )
    if not 1 <= vfs_per_pf <= 62:
        raise ValueError(f"vfs_per_pf must be 1..62, got {vfs_per_pf}")
    specs = []
    next_rdma = total  # mlx5_0..mlx5_<total-1> are the PFs, as on a real host
    for n in range(1, total + 1):
        fabric, pf_name = _rail_names(lab_id, n)
        pf_pci = pf_addresses[n - 1] if pf_addresses else f"0000:{0x10 * n:02x}:00.0"
        bus = int(pf_pci.split(":")[1], 16)
        octet = 10 + n
        vfs = []
        for i in range(vfs_per_pf):
            vfs.append(
                VfSpec(
                    index=i,
                    pci=_vf_pci(bus, i),
                    netdev=f"{PREFIX}{lab_id}r{n}v{i}",
                    rdma=f"mlx5_{next_rdma}",
                    peer=f"vf{i}",
                )
            )
            next_rdma += 1
        v4 = _rail_v4(octet, rail_subnets[n - 1] if n <= len(rail_subnets) else "")
        specs.append(
            RailSpec(
                number=n,
                kind="roce" if n <= rails else "ib",
                fabric_netns=fabric,
                bridge=BRIDGE,
                pf_pci=pf_pci,
                pf_netdev=pf_name,
                pf_rdma=f"mlx5_{n - 1}",
                pf_peer="pf",
                pf_mtu=pf_mtu,
                subnet_v4=v4["subnet"],
                gateway_v4=v4["gateway"],
                range_v4=v4["range"],
                pool_v4=f"gpu{n}-net{octet}",
                pf_address_v4=v4["pf"],
                subnet_v6=f"fd00:{octet}::/64",
                gateway_v6=f"fd00:{octet}::fe",
                range_v6=f"fd00:{octet}::1-fd00:{octet}::c8",
                pool_v6=f"gpu{n}-net{octet}-v6",
                vfs=tuple(vfs),
            )
        )
    return Manifest(
        lab_id=lab_id,
        lab_dir=str(lab_dir),
        host_netns=netns_identity(),
        rails=tuple(specs),
        shape=shape,
    )


def _rail_v4(octet: int, subnet: str) -> dict[str, str]:
    """A rail's IPv4 plan: the cluster-wide /24, or the node's own ``subnet``."""
    if not subnet:
        return {
            "subnet": f"172.16.{octet}.0/24",
            "gateway": f"172.16.{octet}.254",
            "range": f"172.16.{octet}.1-172.16.{octet}.200",
            "pf": "",
        }
    net = ipaddress.IPv4Network(subnet)
    if net.num_addresses < 8:
        raise ValueError(f"rail subnet {subnet}: at least a /29 is needed")
    first, last = net.network_address, net.broadcast_address
    return {
        "subnet": str(net),
        "gateway": str(first + 1),
        "range": f"{first + 2}-{last - 2}",
        "pf": f"{last - 1}/{net.prefixlen}",
    }


def pools_yaml(manifest: Manifest) -> str:
    """SpiderIPPool v2beta1 documents, one IPv4 and one IPv6 pool per rail."""
    docs = []
    for r in manifest.rails:
        for name, version, subnet, ips, gw in (
            (r.pool_v4, 4, r.subnet_v4, r.range_v4, r.gateway_v4),
            (r.pool_v6, 6, r.subnet_v6, r.range_v6, r.gateway_v6),
        ):
            docs.append(
                "apiVersion: spiderpool.spidernet.io/v2beta1\n"
                "kind: SpiderIPPool\n"
                "metadata:\n"
                f"  name: {name}\n"
                "spec:\n"
                f"  ipVersion: {version}\n"
                f"  subnet: {subnet}\n"
                "  ips:\n"
                f"  - {ips}\n"
                f"  gateway: {gw}\n"
            )
    return "---\n".join(docs)


# ----------------------------------------------------------------------- lab


class Lab:
    """A simulated host; a context manager whose exit calls ``down()``."""

    def __init__(self, lab_dir: Path | str, manifest: Manifest) -> None:
        self.dir = Path(lab_dir)
        self.manifest = manifest
        self._tree: PciTree | None = None

    @property
    def tree(self) -> PciTree:
        """The fake PCI tree (its directories are made on first use)."""
        if self._tree is None:
            self._tree = PciTree(self.dir / SYS_DIR)
        return self._tree

    # -------------------------------------------------------- construction

    @classmethod
    def up(
        cls,
        lab_dir: Path | str,
        rails: int = 2,
        vfs_per_pf: int = 2,
        ib_rails: int = 0,
        pf_mtu: int = PF_MTU,
        lab_id: str | None = None,
        progress: bool = False,
        kernel_seams: frozenset[str] = frozenset(),
        shape: str = "",
        rail_subnets: Sequence[str] = (),
    ) -> Lab:
        """Build a lab in ``lab_dir`` (created if needed) and the caller's netns.

        ``kernel_seams`` ({"vf"}, {"vf", "rdma"}): the kernel answers for the
        PFs' VF tables (netdevsim PFs) and for RDMA (railyard_sim.kernel_seams);
        ``rail_subnets``: per-node rail subnets (see ``plan``).
        """
        lab_dir = Path(lab_dir).absolute()
        lab_dir.mkdir(parents=True, exist_ok=True)
        if (lab_dir / MANIFEST).exists():
            raise LabError(f"{lab_dir} already holds a lab; run down first")
        sizes = (rails, vfs_per_pf, ib_rails, pf_mtu, shape, tuple(rail_subnets))
        plan(lab_id or "0000", lab_dir, *sizes)
        lab_id = _claim_id(lab_id)
        manifest = plan(lab_id, lab_dir, *sizes)
        lab = cls(lab_dir, replace(manifest, complete=False))
        try:
            # The marker first: whatever state the build ends in, `down` knows
            # this directory for a lab's (it refuses any other directory).
            (lab_dir / SIM_MARKER).write_text(
                f"railyard simulated host {lab_id}; its plugins are in {BIN_DIR}/\n"
            )
            # Then the manifest, so that down() of a half-built lab knows its id.
            write_manifest(lab_dir, lab.manifest)
            lab._build(manifest, progress, kernel_seams)
        except BaseException:
            lab.down()
            raise
        lab.manifest = manifest
        write_manifest(lab_dir, manifest)
        from railyard_sim import launchers

        launchers.write(lab.bin_dir, lab_dir)
        return lab

    @classmethod
    def load(cls, lab_dir: Path | str) -> Lab:
        """The lab described by ``<lab_dir>/lab.json`` (built by another process)."""
        lab_dir = Path(lab_dir).absolute()
        return cls(lab_dir, load_manifest(lab_dir))

    def _build(self, m: Manifest, progress: bool, seams: frozenset[str]) -> None:
        from railyard_sim import kernel_seams, recording

        unknown = seams - kernel_seams.SEAMS
        if unknown:
            raise LabError(f"unknown kernel seams {sorted(unknown)}")
        netdevsim_pfs = "vf" in seams

        def say(msg: str) -> None:
            if progress:
                print(f"[railyard-sim] {msg}", flush=True, file=sys.stderr)

        say(f"lab {m.lab_id}: {len(m.rails)} rails, fabric netns and bridges")
        # Rail 1's netns is the id's claim, made by _claim_id.
        if len(m.rails) > 1:
            run_ip(
                [], batch="".join(f"netns add {r.fabric_netns}\n" for r in m.rails[1:])
            )
        host = []
        for r in m.rails:
            if not netdevsim_pfs:
                host.append(
                    f"link add {r.pf_netdev} mtu {r.pf_mtu} type veth peer name "
                    f"{r.pf_peer} mtu {r.pf_mtu} netns {r.fabric_netns}\n"
                )
                host.append(f"link set {r.pf_netdev} up\n")
            if r.pf_address_v4 and not netdevsim_pfs:
                host.append(f"addr add {r.pf_address_v4} dev {r.pf_netdev}\n")
            for v in r.vfs:
                host.append(
                    f"link add {v.netdev} type veth peer name {v.peer} "
                    f"mtu {r.pf_mtu} netns {r.fabric_netns}\n"
                )
        say(f"lab {m.lab_id}: PF and VF stand-ins (veth)")
        run_ip([], batch="".join(host))
        if seams:
            kernel_seams.write(self.dir, {"vf": {}, "rdma": "rdma" in seams})
        if netdevsim_pfs:
            say(f"lab {m.lab_id}: netdevsim PFs (the kernel keeps the VF tables)")
            pfs: dict[str, int] = {}
            for r in m.rails:
                nsim_id, netdev = kernel_seams.add_netdevsim_pf(len(r.vfs))
                pfs[r.pf_netdev] = nsim_id
                kernel_seams.write(self.dir, {"vf": pfs, "rdma": "rdma" in seams})
                run_ip(
                    [
                        "link",
                        "set",
                        netdev,
                        "name",
                        r.pf_netdev,
                        "mtu",
                        str(r.pf_mtu),
                        "up",
                    ]
                )
        for r in m.rails:
            ports = [*(() if netdevsim_pfs else (r.pf_peer,)), *(v.peer for v in r.vfs)]
            fabric = [
                "link set lo up\n",
                f"link add {r.bridge} mtu {r.pf_mtu} type bridge mcast_snooping 0\n",
                f"addr add {r.gateway_v4}/{r.subnet_v4.split('/')[1]} dev {r.bridge}\n",
                f"addr add {r.gateway_v6}/64 dev {r.bridge} nodad\n",
                *(f"link set {p} master {r.bridge} up\n" for p in ports),
                f"link set {r.bridge} up\n",
            ]
            run_ip([], netns=r.fabric_netns, batch="".join(fabric))
        say(f"lab {m.lab_id}: fake PCI tree, pools, recording state")
        placed: dict[str, tuple[str, int]] = {}
        if m.shape:
            from railyard_sim.shapes import build, shape

            placed = build(self.tree, shape(m.shape))
        for r in m.rails:
            parent, numa = placed.get(r.pf_pci, (None, None))
            self.tree.pf(
                r.pf_pci,
                r.pf_netdev,
                numvfs=len(r.vfs),
                parent=parent,
                numa_node=numa,
                pci_class=CLASS_INFINIBAND if r.kind == "ib" else CLASS_ETHERNET,
            )
            self.tree.rdma(r.pf_pci, r.pf_rdma, kind=r.kind)
            for v in r.vfs:
                self.tree.vf(r.pf_pci, v.index, v.pci, v.netdev)
                self.tree.rdma(v.pci, v.rdma, kind=r.kind)
        # rdma_cm loaded: its configfs directory (see cni.kernel.roce).
        (self.sys_root / "kernel" / "config" / "rdma_cm").mkdir(
            parents=True, exist_ok=True
        )
        (self.dir / POOLS).write_text(pools_yaml(m))
        recording.init_state(self.dir, m)

    # -------------------------------------------------------------- lookups

    @property
    def id(self) -> str:
        return self.manifest.lab_id

    @property
    def rails(self) -> tuple[RailSpec, ...]:
        return self.manifest.rails

    @property
    def sys_root(self) -> Path:
        return self.dir / SYS_DIR

    @property
    def pools_file(self) -> Path:
        return self.dir / POOLS

    @property
    def prefix(self) -> str:
        """Every netns and host link of this lab starts with it."""
        return f"{PREFIX}{self.id}"

    def rail(self, number: int) -> RailSpec:
        for r in self.rails:
            if r.number == number:
                return r
        raise KeyError(f"lab {self.id} has no rail {number}")

    def vfs(self) -> Iterator[tuple[RailSpec, VfSpec]]:
        for r in self.rails:
            for v in r.vfs:
                yield r, v

    def vf(self, pci: str) -> tuple[RailSpec, VfSpec]:
        for r, v in self.vfs():
            if v.pci == pci:
                return r, v
        raise KeyError(f"lab {self.id} has no VF {pci}")

    def netdev_of(self, pci: str) -> str | None:
        """The VF's current netdev name, as real sysfs would show it now.

        A stand-in in the host netns is found through its fabric peer, so a
        rename (a plugin restoring the name after a rebind) is followed; the
        fake tree's ``net/`` entry is re-synced to it. Elsewhere (in a pod
        netns, or no netdev at all) this is the tree's name (None if none).
        """
        from railyard_sim import recording

        if (self.dir / recording.STATE).is_file():
            name = recording.host_netdev(self.dir, pci)
            if name is not None:
                return name
        names = self.tree.netdevs(pci)
        return names[0] if names else None

    @property
    def bin_dir(self) -> Path:
        """The CNI bin dir whose plugins run on this simulated host."""
        return self.dir / BIN_DIR

    @property
    def state_dir(self) -> Path:
        """The plugins' state dir on this host unless RAILYARD_STATE_DIR says."""
        return self.dir / "state"

    def netns_name(self, suffix: str) -> str:
        """A lab-owned netns name (removed by ``down()``), e.g. for a pod."""
        return f"{self.prefix}-{suffix}"

    # -------------------------------------------------------------- emulation

    def vanish_netns(self, pod_netns: str, ifnames: str | Iterable[str]) -> None:
        """Destroy a pod netns the way the kernel does with real VFs inside.

        A physical netdev is not destroyed with its namespace: the kernel closes
        it and moves it back to the initial netns under the name it had in the
        pod (``devN`` if that name is taken there). A veth would die instead, so
        the stand-ins are moved back first, then the namespace is deleted.
        RDMA devices recorded there fall back to the host by themselves (see
        ``railyard_sim.recording``). Afterwards the fake tree's ``net/`` entries are
        re-synced to the names the returned VFs now have in the host, which is
        what real sysfs shows at that moment (``net1``, or ``devN``).
        """
        name = netns_name_of(pod_netns)
        if name is None:
            raise ValueError(f"{pod_netns}: only named netns (ip netns) can vanish")
        if isinstance(ifnames, str):
            ifnames = [ifnames]
        host_links = set(link_names())
        for ifname in ifnames:
            info = ip_json(["link", "show", "dev", ifname], netns=name)
            if not info:
                raise LabError(f"{ifname} is not in netns {name}")
            run_ip(["link", "set", "dev", ifname, "down"], netns=name)
            target = ifname
            if ifname in host_links:
                target = f"dev{info[0]['ifindex']}"
                run_ip(["link", "set", "dev", ifname, "name", target], netns=name)
            run_ip(
                ["link", "set", "dev", target, "netns", str(os.getpid())], netns=name
            )
            host_links.add(target)
        run_ip(["netns", "del", name])
        from railyard_sim.recording import host_netdev

        for _, vf in self.vfs():
            host_netdev(self.dir, vf.pci)

    # ------------------------------------------------------------------ down

    def down(self) -> None:
        """Remove every netns, link, process and file of the lab; safe to call twice.

        Also for a half-built lab, and whatever its pods left: stand-ins in any
        netns die with their fabric peers, pod netns carry the lab's prefix, and
        the lab's ipamd (if the CLI started one) is found by its command line
        even when its pid file or socket is gone. Nothing here raises for a
        thing that is already gone.
        """
        from railyard_sim import daemon, kernel_seams, recording

        daemon.stop(self.dir)
        netdevsim_pfs = kernel_seams.enabled(self.dir).get("vf") or {}
        for nsim_id in dict(netdevsim_pfs).values():  # type: ignore[call-overload]
            kernel_seams.remove_netdevsim_pf(int(nsim_id))
        kernel_seams.remove_file(self.dir)
        remove_prefixed(self.prefix)
        for name in (MANIFEST, POOLS, SIM_MARKER):
            try:
                (self.dir / name).unlink(missing_ok=True)
            except OSError:  # not ours (a directory in the way): leave it
                pass
        recording.remove_state(self.dir)
        shutil.rmtree(self.dir / SYS_DIR, ignore_errors=True)
        shutil.rmtree(self.bin_dir, ignore_errors=True)

    # -------------------------------------------------------- context manager

    def __enter__(self) -> Lab:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()


def remove_prefixed(prefix: str, timeout: float = 5.0) -> None:
    """Delete every named netns and caller-netns link whose name starts with ``prefix``.

    Deleting a veth end deletes its peer synchronously, wherever it is, while a
    deleted netns only tears its devices down later in a kernel worker; so the
    veths inside go first, then the namespaces, then what is left here. Waits
    (bounded) until no such link is listed any more.
    """
    own_ns = [n for n in netns_names() if n.startswith(prefix)]
    for ns in own_ns:
        veths = ip_json(["link", "show", "type", "veth"], netns=ns)
        if veths:
            # -force: a peer deleted with its pair is gone by its own turn.
            run_ip(
                ["-force"],
                netns=ns,
                check=False,
                batch="".join(f"link del dev {link['ifname']}\n" for link in veths),
            )
    if own_ns:
        run_ip(
            ["-force"],
            check=False,
            batch="".join(f"netns del {ns}\n" for ns in own_ns),
        )
    deadline = time.monotonic() + timeout
    while True:
        host = [dev for dev in link_names() if dev.startswith(prefix)]
        if not host or time.monotonic() >= deadline:
            break
        run_ip(
            ["-force"],
            check=False,
            batch="".join(f"link del dev {dev}\n" for dev in host),
        )
        time.sleep(0.02)


def _claim_id(wanted: str | None) -> str:
    """A lab id no other lab on this machine uses, claimed atomically.

    ``ip netns add`` creates its mount point with O_EXCL, so making rail 1's
    fabric netns is the claim: two labs started at once cannot both get an id
    (and a failed claim owns nothing that ``down()`` could remove).
    """
    for _ in range(20):
        lab_id = wanted or _fresh_id()
        fabric, _pf = _rail_names(lab_id, 1)
        if run_ip(["netns", "add", fabric], check=False).returncode == 0:
            return lab_id
        if wanted:
            raise LabError(f"lab id {wanted} is in use on this machine")
    raise LabError("no free lab id found")


def _fresh_id() -> str:
    import secrets  # ~15 ms of imports a plugin process never needs

    taken = {
        n[len(PREFIX) : len(PREFIX) + 4]
        for n in netns_names() + link_names()
        if n.startswith(PREFIX)
    }
    while True:
        candidate = secrets.token_hex(2)
        if candidate not in taken:
            return candidate
