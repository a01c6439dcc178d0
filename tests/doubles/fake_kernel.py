# SPDX-License-Identifier: Apache-2.0
"""``FakeKernel``: one in-memory host implementing every kernel seam together.

The lifecycle talks to the kernel through several Protocols (``Links``,
``Netns``, ``NicProbes``, ``VfOps``, ``RdmaOps``, ``DeviceWaiter`` and the
sysfs reader); on a real host they share one state, so here they are views of
one ``FakeKernel``: a VF moved into a pod leaves the host's link list *and*
its PCI function's ``net/``; a netns that dies sends its physical netdevs and
RDMA devices home; a driver rebind recreates the netdev and RDMA device.

Where the lifecycle depends on a kernel behaviour, the fake does what the
real adapters do (the shared cases in ``tests/kernel/test_fake_kernel_
conformance.py`` run against both):

- errors are the contract's: ENODEV -> ``LinkNotFound``, EEXIST ->
  ``LinkExists``, a missing netns path -> ``NetnsNotFound``, a missing
  address (EADDRNOTAVAIL) or route (ESRCH) -> ``KernelError`` with that errno;
- a netns move takes the link down and drops its addresses and routes; a
  link cannot be renamed or moved onto a taken name (an up link can be
  renamed, as current kernels allow);
- setting a link down drops the routes through it and its IPv6 addresses
  (``keep_addr_on_down`` is 0 by default); an address on an up link adds
  the kernel's prefix route to ``main`` unless ``noprefixroute``;
- PF-side settings an IPoIB PF cannot take (MAC, VLAN, rate, spoofchk,
  trust) fail with EOPNOTSUPP, and GUIDs on an Ethernet PF too, as the
  simulated host's recording seam does;
- RDMA devices in exclusive mode are visible only from their netns.

Tests build a host (``add_pf``, ``add_vf``, ``add_netns``), run the code
under test with ``kernel.deps(state_dir)``, and assert on state:
``kernel.link(pod, "net1").mtu == 9000``, ``kernel.vf_info(pf, 0).trust``.
Failures are injected by operation name, optionally after some calls:
``kernel.fail("set_trust", errno.EOPNOTSUPP, after=1)``. ``journal`` lists
every operation in order for the few tests where order is the contract.
"""

from __future__ import annotations

import builtins
import errno as errno_mod
import ipaddress
import itertools
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from cni.deps import Deps
from cni.kernel import (
    DeviceBusy,
    DeviceNotFound,
    DeviceWaiter,
    GatewayCheck,
    InvalidArgument,
    KernelError,
    LinkExists,
    LinkInfo,
    LinkNotFound,
    Links,
    Netns,
    NetnsNotFound,
    NetnsPath,
    NicProbeReport,
    NicProbes,
    NotSupported,
    PciDevice,
    ProbeAnswer,
    RdmaOps,
    RouteSpec,
    RuleSpec,
    Timeout,
    VfInfo,
    VfOps,
)
from cni.kernel.sysfs import check_pci

ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32
MAIN = 254
RT_SCOPE_LINK = 253
HOST_PATHS = frozenset({"/proc/self/ns/net", "/proc/thread-self/ns/net"})
#: PF-side operations are journalled as ``set_vf_*`` (``set_mac`` is the netdev's).
ETHERNET_ONLY = {
    "set_vf_vlan": "vlan",
    "set_vf_mac": "mac",
    "set_vf_rate": "rate",
    "set_vf_spoofchk": "spoofchk",
    "set_vf_trust": "trust",
}
IB_ONLY = {"set_vf_node_guid": "node GUID", "set_vf_port_guid": "port GUID"}

_ERRNO_EXC: dict[int, type[KernelError]] = {
    errno_mod.ENODEV: LinkNotFound,
    errno_mod.EEXIST: LinkExists,
    errno_mod.EOPNOTSUPP: NotSupported,
    errno_mod.EINVAL: InvalidArgument,
    errno_mod.ERANGE: InvalidArgument,
    errno_mod.EBUSY: DeviceBusy,
    errno_mod.ETIMEDOUT: Timeout,
}


def kernel_error(code: int, what: str) -> KernelError:
    """The contract exception the real adapters raise for ``code``."""
    cls = _ERRNO_EXC.get(code, KernelError)
    return cls(f"{what}: {os.strerror(code)}", code)


@dataclass
class Link:
    """One netdev. ``pci`` ties a VF's or PF's netdev to its PCI function."""

    index: int
    name: str
    mac: str
    mtu: int
    max_mtu: int = 9978
    up: bool = False
    kind: str | None = None
    altnames: list[str] = field(default_factory=list)
    link_type: int = ARPHRD_ETHER
    pci: str | None = None
    addresses: list[str] = field(default_factory=list)

    def info(self) -> LinkInfo:
        return LinkInfo(
            index=self.index,
            name=self.name,
            mac=self.mac,
            mtu=self.mtu,
            up=self.up,
            kind=self.kind,
            altnames=tuple(self.altnames),
            link_type=self.link_type,
        )


@dataclass
class Namespace:
    path: NetnsPath
    links: dict[str, Link] = field(default_factory=dict)
    routes: list[RouteSpec] = field(default_factory=list)
    rules: list[RuleSpec] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)


@dataclass
class PciFunction:
    pci: str
    driver: str | None = "mlx5_core"
    pf_pci: str | None = None  # set for a VF
    vf_index: int | None = None
    vfs: dict[int, str] = field(default_factory=dict)  # a PF's virtfnN
    sriov: bool = False  # a PF: has sriov_numvfs
    ib: bool = False  # an InfiniBand function (IPoIB netdev, GUIDs)
    default_mtu: int = 1500  # what a driver bind gives its netdev
    #: The name its netdev gets when a driver bind recreates it.
    rebind_names: list[str] = field(default_factory=list)


@dataclass
class RdmaDevice:
    name: str
    pci: str
    netns: NetnsPath = None


@dataclass
class _Fault:
    exc: KernelError
    after: int
    times: int | None
    when: str | None  # only calls whose arguments mention this string


class FakeKernel:
    """The whole simulated host; see the module doc. Views: ``links``,
    ``netns``, ``probes``, ``vf``, ``rdma``, ``waiter``, ``sysfs``."""

    def __init__(self, rdma_mode: str = "exclusive") -> None:
        self.namespaces: dict[NetnsPath, Namespace] = {None: Namespace(None)}
        self.pci: dict[str, PciFunction] = {}
        self.vf_tables: dict[str, dict[int, VfInfo]] = {}  # PF pci -> VF table
        self.rdma_devices: dict[str, RdmaDevice] = {}
        self.rdma_mode = rdma_mode
        #: Hosts answering ARP/NDP on the wire: ip -> MAC (gateways, squatters).
        self.wire: dict[str, str] = {}
        self.announced: list[tuple[str, tuple[str, ...], NetnsPath]] = []
        self.journal: list[str] = []
        self._faults: dict[str, list[_Fault]] = {}
        self._calls: dict[str, int] = {}
        self._index = itertools.count(2)
        self._tmp = itertools.count(1)
        self._rdma_index = itertools.count(100)
        self.links = FakeLinks(self)
        self.netns = FakeNetns(self)
        self.probes = FakeProbes(self)
        self.vf = FakeVfOps(self)
        self.rdma = FakeRdma(self)
        self.waiter = FakeWaiter(self)
        self.sysfs = FakeSysfs(self)

    # ------------------------------------------------------------ building

    def deps(self, state_dir: Path) -> Deps:
        """A ``Deps`` whose every kernel seam is this host."""
        return Deps(
            links=self.links,
            netns=self.netns,
            probes=self.probes,
            vf=self.vf,
            rdma=self.rdma,
            waiter=self.waiter,
            sysfs=self.sysfs,  # type: ignore[arg-type]  # duck-typed Sysfs
            state_dir=state_dir,
        )

    def add_netns(self, path: str) -> str:
        if path in self.namespaces:
            raise LinkExists(f"netns {path} exists", errno_mod.EEXIST)
        self.namespaces[path] = Namespace(path)
        return path

    def add_link(
        self,
        name: str,
        netns: NetnsPath = None,
        *,
        mac: str | None = None,
        mtu: int = 1500,
        up: bool = False,
        kind: str | None = "veth",
        link_type: int = ARPHRD_ETHER,
        pci: str | None = None,
    ) -> Link:
        """A netdev (a pod's ``eth0``, a squatter, a PF or VF netdev)."""
        ns = self._ns(netns)
        if name in ns.links:
            raise kernel_error(errno_mod.EEXIST, f"add link {name}")
        index = next(self._index)
        link = Link(
            index=index,
            name=name,
            mac=mac or _mac_for(index, link_type),
            mtu=mtu,
            up=up,
            kind=kind,
            link_type=link_type,
            pci=pci,
        )
        ns.links[name] = link
        return link

    def add_pf(
        self, pci: str, netdev: str, *, mtu: int = 9000, ib: bool = False
    ) -> Link:
        """An SR-IOV PF with its netdev in the host."""
        self.pci[pci] = PciFunction(pci, sriov=True, ib=ib)
        self.vf_tables[pci] = {}
        link_type = ARPHRD_INFINIBAND if ib else ARPHRD_ETHER
        return self.add_link(
            netdev, mtu=mtu, up=True, kind=None, link_type=link_type, pci=pci
        )

    def add_vf(
        self,
        pf_pci: str,
        index: int,
        pci: str,
        netdev: str | None,
        *,
        mtu: int = 1500,
        rdma: str | None = None,
        driver: str = "mlx5_core",
        vf: VfInfo | None = None,
    ) -> Link | None:
        """VF ``index`` of ``pf_pci``, its PF table entry, netdev and RDMA device."""
        pf = self.pci[pf_pci]
        pf.vfs[index] = pci
        self.pci[pci] = PciFunction(
            pci, driver=driver, pf_pci=pf_pci, vf_index=index, ib=pf.ib, default_mtu=mtu
        )
        if vf is None:
            guid = f"02:00:00:00:00:00:{index >> 8:02x}:{index & 0xFF:02x}"
            vf = (
                VfInfo(vf=index, node_guid=guid, port_guid=guid)
                if pf.ib
                else VfInfo(vf=index, spoofchk=True, trust=False)
            )
        self.vf_tables[pf_pci][index] = vf
        if rdma is not None:
            self.rdma_devices[rdma] = RdmaDevice(rdma, pci)
        if netdev is None:
            return None
        link_type = ARPHRD_INFINIBAND if pf.ib else ARPHRD_ETHER
        link = self.add_link(netdev, mtu=mtu, kind=None, link_type=link_type, pci=pci)
        if pf.ib:
            link.mac = _ipoib_mac(vf.port_guid)
        return link

    def delete_netns(self, path: str) -> None:
        """The netns dies: physical netdevs and RDMA devices go to the host.

        Virtual links die with it. A returning netdev keeps its name unless
        the host has one of that name; then the kernel names it ``dev<index>``.
        """
        ns = self.namespaces.pop(path)
        host = self.namespaces[None]
        for link in ns.links.values():
            if link.kind is not None:
                continue
            link.up = False
            link.addresses = []
            if link.name in host.links:
                link.name = f"dev{link.index}"
            host.links[link.name] = link
        for dev in self.rdma_devices.values():
            if dev.netns == path:
                dev.netns = None

    # ---------------------------------------------------------------- faults

    def fail(
        self,
        op: str,
        code: int = errno_mod.EIO,
        *,
        after: int = 0,
        times: int | None = 1,
        when: str | None = None,
        exc: KernelError | None = None,
    ) -> None:
        """Make operation ``op`` fail with ``code`` (or ``exc``).

        ``after`` matching calls succeed first; ``times`` failures then (None:
        every later call); ``when`` restricts it to calls whose arguments
        include that string (a netdev name, a netns path, an address).
        """
        err = exc or kernel_error(code, f"injected {op} failure")
        self._faults.setdefault(op, []).append(_Fault(err, after, times, when))

    def clear_faults(self) -> None:
        self._faults.clear()

    def pending_faults(self) -> list[str]:
        """Operations armed but never reached (a test naming a step that never ran)."""
        return [op for op, faults in self._faults.items() if faults]

    def calls(self, op: str) -> int:
        return self._calls.get(op, 0)

    def _enter(self, op: str, *args: object) -> None:
        self.journal.append(op)
        self._calls[op] = self._calls.get(op, 0) + 1
        for fault in self._faults.get(op, []):
            if fault.when is not None and fault.when not in {str(a) for a in args}:
                continue
            if fault.after > 0:
                fault.after -= 1
                return
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self._faults[op].remove(fault)
            raise fault.exc
        return

    # ------------------------------------------------------------- read-backs

    def _ns(self, netns: NetnsPath) -> Namespace:
        key = None if netns in HOST_PATHS else netns
        try:
            return self.namespaces[key]
        except KeyError:
            raise NetnsNotFound(
                f"netns {netns}: No such file or directory", errno_mod.ENOENT
            ) from None

    def _link(self, name: str, netns: NetnsPath) -> Link:
        ns = self._ns(netns)
        try:
            return ns.links[name]
        except KeyError:
            where = f" in {netns}" if netns else ""
            raise kernel_error(errno_mod.ENODEV, f"link {name}{where}") from None

    def link(self, netns: NetnsPath, name: str) -> Link | None:
        """The link ``name`` in ``netns`` (None: the host), or None."""
        return self._ns(netns).links.get(name)

    def link_names(self, netns: NetnsPath = None) -> list[str]:
        return sorted(self._ns(netns).links)

    def where_is(self, pci: str) -> tuple[NetnsPath, Link] | None:
        """The netns and link of PCI function ``pci``'s netdev, wherever it is."""
        for path, ns in self.namespaces.items():
            for link in ns.links.values():
                if link.pci == pci:
                    return path, link
        return None

    def routes_in(self, netns: NetnsPath, table: int | None = None) -> list[RouteSpec]:
        return [r for r in self._ns(netns).routes if table is None or r.table == table]

    def rules_in(self, netns: NetnsPath) -> list[RuleSpec]:
        return list(self._ns(netns).rules)

    def vf_info(self, pf_pci: str, index: int) -> VfInfo:
        return self.vf_tables[pf_pci][index]

    def rdma_netns(self, dev: str) -> NetnsPath:
        return self.rdma_devices[dev].netns

    def pf_pci_of_netdev(self, pf: str) -> str:
        link = self._ns(None).links.get(pf)
        if link is None or link.pci is None or link.pci not in self.vf_tables:
            raise kernel_error(errno_mod.ENODEV, f"{pf}: no such PF")
        return link.pci


def _mac_for(index: int, link_type: int) -> str:
    if link_type == ARPHRD_INFINIBAND:
        return _ipoib_mac(f"02:00:00:00:00:00:{index >> 8:02x}:{index & 0xFF:02x}")
    return f"02:fa:00:00:{index >> 8:02x}:{index & 0xFF:02x}"


def _ipoib_mac(port_guid: str | None) -> str:
    """A 20-byte IPoIB hardware address: QPN and GID prefix, then the port GUID."""
    guid = port_guid or "00:00:00:00:00:00:00:00"
    return "00:00:01:07:fe:80:00:00:00:00:00:00:" + guid


def _family(cidr: str) -> int:
    return 10 if ipaddress.ip_network(cidr, strict=False).version == 6 else 2


def _route_key(r: RouteSpec) -> tuple[object, ...]:
    dst = str(ipaddress.ip_network(r.dst, strict=False))
    return (dst, r.table, r.metric if r.metric is not None else None)


# -------------------------------------------------------------------- Links


class FakeLinks:
    """``Links`` on the fake host."""

    def __init__(self, k: FakeKernel) -> None:
        self.k = k
        self.closed = 0

    def get(self, name: str, netns: NetnsPath = None) -> LinkInfo:
        self.k._enter("get", name, netns)
        return self.k._link(name, netns).info()

    def find(self, name: str, netns: NetnsPath = None) -> LinkInfo | None:
        try:
            return self.get(name, netns)
        except LinkNotFound:
            return None

    def list(self, netns: NetnsPath = None) -> builtins.list[LinkInfo]:
        self.k._enter("list", netns)
        return [ln.info() for ln in self.k._ns(netns).links.values()]

    def set_up(self, name: str, netns: NetnsPath = None) -> None:
        self.k._enter("set_up", name, netns)
        link = self.k._link(name, netns)
        if not link.up:
            link.up = True
            ns = self.k._ns(netns)
            for cidr in link.addresses:
                _add_prefix_route(ns, link, cidr)

    def set_down(self, name: str, netns: NetnsPath = None) -> None:
        self.k._enter("set_down", name, netns)
        link = self.k._link(name, netns)
        if link.up:
            link.up = False
            ns = self.k._ns(netns)
            ns.routes = [r for r in ns.routes if r.dev != name]
            link.addresses = [a for a in link.addresses if _family(a) != 10]

    def rename(self, name: str, new_name: str, netns: NetnsPath = None) -> None:
        self.k._enter("rename", name, new_name, netns)
        ns = self.k._ns(netns)
        link = self.k._link(name, netns)
        if new_name == name:
            return
        if new_name in ns.links:
            raise kernel_error(errno_mod.EEXIST, f"rename {name} to {new_name}")
        del ns.links[name]
        link.name = new_name
        if new_name in link.altnames:
            link.altnames.remove(new_name)
        ns.links[new_name] = link
        for i, r in enumerate(ns.routes):
            if r.dev == name:
                ns.routes[i] = replace(r, dev=new_name)

    def set_mtu(self, name: str, mtu: int, netns: NetnsPath = None) -> None:
        self.k._enter("set_mtu", name, mtu, netns)
        link = self.k._link(name, netns)
        if not 68 <= mtu <= link.max_mtu:
            raise kernel_error(errno_mod.EINVAL, f"set mtu {mtu} on {name}")
        link.mtu = mtu

    def set_mac(self, name: str, mac: str, netns: NetnsPath = None) -> None:
        self.k._enter("set_mac", name, mac, netns)
        link = self.k._link(name, netns)
        if len(mac.split(":")) != len(link.mac.split(":")):
            raise kernel_error(errno_mod.EINVAL, f"set mac {mac} on {name}")
        link.mac = mac.lower()

    def del_altname(self, name: str, altname: str, netns: NetnsPath = None) -> None:
        self.k._enter("del_altname", name, altname, netns)
        link = self.k._link(name, netns)
        if altname not in link.altnames:
            raise kernel_error(errno_mod.ENOENT, f"del altname {altname}")
        link.altnames.remove(altname)

    def move(self, name: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        self.k._enter("move", name, to_netns, netns)
        src = self.k._ns(netns)
        dst = self.k._ns(to_netns)
        link = self.k._link(name, netns)
        if dst is src:
            return
        if name in dst.links:
            raise kernel_error(errno_mod.EEXIST, f"move {name} to {to_netns}")
        # dev_change_net_namespace: closes the device, flushes its addresses
        # and the routes through it.
        del src.links[name]
        src.routes = [r for r in src.routes if r.dev != name]
        link.up = False
        link.addresses = []
        dst.links[name] = link

    def move_renamed(
        self, index: int, to_netns: NetnsPath, pattern: str, netns: NetnsPath = None
    ) -> str:
        """Move and rename in one step, the kernel picking a free name from
        ``pattern`` ("x%d": the lowest free number) in the target netns."""
        self.k._enter("move_renamed", index, to_netns, pattern, netns)
        src = self.k._ns(netns)
        dst = self.k._ns(to_netns)
        link = next((ln for ln in src.links.values() if ln.index == index), None)
        if link is None:
            raise kernel_error(errno_mod.ENODEV, f"link index {index}")
        if "%d" in pattern:
            new_name = next(
                pattern.replace("%d", str(n))
                for n in itertools.count()
                if pattern.replace("%d", str(n)) not in dst.links
            )
        elif pattern in dst.links and dst.links[pattern] is not link:
            if link.name in dst.links or dst is src:
                raise kernel_error(errno_mod.EEXIST, f"move link {index} as {pattern}")
            # The kernel moves first, then renames in the target: a refused
            # rename leaves the link moved under its old name.
            self._move_as(link, src, dst, link.name)
            raise kernel_error(errno_mod.EEXIST, f"rename {link.name} to {pattern}")
        else:
            new_name = pattern
        if "%d" not in pattern and dst is not src and link.name not in dst.links:
            # Likewise the rename step (a "rename" fault) fails after the move.
            self._move_as(link, src, dst, link.name)
            self.k._enter("rename", link.name, new_name, to_netns)
            src = dst
        self._move_as(link, src, dst, new_name)
        return new_name

    def _move_as(
        self, link: Link, src: Namespace, dst: Namespace, new_name: str
    ) -> None:
        old = link.name
        del src.links[old]
        # dev_change_net_namespace: closes the device, flushes its addresses
        # and the routes through it.
        src.routes = [r for r in src.routes if r.dev != old]
        if dst is not src:
            link.up = False
            link.addresses = []
        link.name = new_name
        if new_name in link.altnames:
            link.altnames.remove(new_name)
        dst.links[new_name] = link

    def addresses(self, name: str, netns: NetnsPath = None) -> builtins.list[str]:
        self.k._enter("addresses", name, netns)
        return list(self.k._link(name, netns).addresses)

    def add_address(
        self,
        name: str,
        cidr: str,
        netns: NetnsPath = None,
        *,
        noprefixroute: bool = False,
        nodad: bool = False,
    ) -> None:
        self.k._enter("add_address", name, cidr, netns)
        link = self.k._link(name, netns)
        iface = ipaddress.ip_interface(cidr)
        norm = f"{iface.ip}/{iface.network.prefixlen}"
        if norm in link.addresses:
            raise kernel_error(errno_mod.EEXIST, f"add address {cidr} to {name}")
        link.addresses.append(norm)
        if link.up and not noprefixroute:
            _add_prefix_route(self.k._ns(netns), link, norm)

    def del_address(self, name: str, cidr: str, netns: NetnsPath = None) -> None:
        self.k._enter("del_address", name, cidr, netns)
        link = self.k._link(name, netns)
        iface = ipaddress.ip_interface(cidr)
        norm = f"{iface.ip}/{iface.network.prefixlen}"
        if norm not in link.addresses:
            raise kernel_error(
                errno_mod.EADDRNOTAVAIL, f"delete address {cidr} from {name}"
            )
        link.addresses.remove(norm)
        ns = self.k._ns(netns)
        net = str(iface.network)
        ns.routes = [
            r
            for r in ns.routes
            if not (r.dev == name and r.table == MAIN and r.dst == net and r.gw is None)
        ]

    def flush_addresses(self, name: str, netns: NetnsPath = None) -> None:
        for cidr in list(self.k._link(name, netns).addresses):
            self.del_address(name, cidr, netns)

    def add_route(self, route: RouteSpec, netns: NetnsPath = None) -> None:
        self.k._enter("add_route", route.dst, route.dev, route.table, netns)
        ns = self.k._ns(netns)
        if route.dev is not None:
            link = self.k._link(route.dev, netns)
            if not link.up:
                raise kernel_error(errno_mod.ENETDOWN, f"add route {route.dst}")
        key = _route_key(route)
        if any(_route_key(r) == key for r in ns.routes):
            raise kernel_error(errno_mod.EEXIST, f"add route {route.dst}")
        dst = str(ipaddress.ip_network(route.dst, strict=False))
        ns.routes.append(replace(route, dst=dst))

    def del_route(self, route: RouteSpec, netns: NetnsPath = None) -> None:
        self.k._enter("del_route", route.dst, route.dev, route.table, netns)
        ns = self.k._ns(netns)
        if route.dev is not None:
            self.k._link(route.dev, netns)
        dst = str(ipaddress.ip_network(route.dst, strict=False))
        for r in ns.routes:
            if (
                r.dst == dst
                and r.table == route.table
                and (route.dev is None or r.dev == route.dev)
                and (route.gw is None or r.gw == route.gw)
            ):
                ns.routes.remove(r)
                return
        raise kernel_error(errno_mod.ESRCH, f"delete route {route.dst}")

    def routes(
        self, table: int = 254, family: int = 0, netns: NetnsPath = None
    ) -> builtins.list[RouteSpec]:
        self.k._enter("routes", table, netns)
        return [
            r
            for r in self.k._ns(netns).routes
            if r.table == table and (family == 0 or _family(r.dst) == family)
        ]

    def add_rule(self, rule: RuleSpec, netns: NetnsPath = None) -> None:
        self.k._enter("add_rule", rule.src, rule.table, netns)
        ns = self.k._ns(netns)
        if rule in ns.rules:
            raise kernel_error(errno_mod.EEXIST, f"add rule from {rule.src}")
        ns.rules.append(rule)

    def del_rule(self, rule: RuleSpec, netns: NetnsPath = None) -> None:
        self.k._enter("del_rule", rule.src, rule.table, netns)
        ns = self.k._ns(netns)
        if rule not in ns.rules:
            raise kernel_error(errno_mod.ENOENT, f"delete rule from {rule.src}")
        ns.rules.remove(rule)

    def rules(
        self, family: int = 0, netns: NetnsPath = None
    ) -> builtins.list[RuleSpec]:
        self.k._enter("rules", netns)
        return [r for r in self.k._ns(netns).rules if family in (0, r.family)]

    def set_sysctl(self, key: str, value: str, netns: NetnsPath = None) -> None:
        self.k._enter("set_sysctl", key, netns)
        ns = self.k._ns(netns)
        parts = key.split("/")
        if len(parts) == 4 and parts[2] == "conf" and parts[3] and parts[1]:
            if parts[3] not in ns.links and parts[3] not in ("all", "default"):
                raise kernel_error(errno_mod.ENOENT, f"sysctl {key}")
        ns.sysctls[key] = value

    def close(self) -> None:
        self.closed += 1


def _add_prefix_route(ns: Namespace, link: Link, cidr: str) -> None:
    iface = ipaddress.ip_interface(cidr)
    v6 = iface.version == 6
    route = RouteSpec(
        dst=str(iface.network),
        dev=link.name,
        table=MAIN,
        scope=RT_SCOPE_LINK if not v6 else 0,
        src=None if v6 else str(iface.ip),
        metric=256 if v6 else None,
    )
    if all(_route_key(r) != _route_key(route) for r in ns.routes):
        ns.routes.append(route)


# -------------------------------------------------------------------- Netns


class FakeNetns:
    """``Netns``: paths are names in ``FakeKernel.namespaces``."""

    def __init__(self, k: FakeKernel) -> None:
        self.k = k

    def exists(self, path: str) -> bool:
        return bool(path) and (path in self.k.namespaces or path in HOST_PATHS)

    def check(self, path: str) -> None:
        self.k._enter("netns_check", path)
        self.k._ns(path)

    def is_current(self, path: str) -> bool:
        return path in HOST_PATHS

    @contextmanager
    def temporary(self) -> Iterator[str]:
        self.k._enter("temporary")
        path = self.k.add_netns(f"/run/fake-netns/tmp{next(self.k._tmp)}")
        try:
            yield path
        finally:
            # As Namespaces.temporary: a physical netdev left inside goes home.
            self.k.delete_netns(path)


# ------------------------------------------------------------------- Probes


class FakeProbes:
    """``NicProbes``: who answers is ``FakeKernel.wire`` (ip -> MAC)."""

    def __init__(self, k: FakeKernel) -> None:
        self.k = k

    def _ready(self, ifname: str, netns: NetnsPath) -> Link:
        link = self.k._link(ifname, netns)
        if link.link_type == ARPHRD_INFINIBAND:
            raise NotSupported(f"no ARP/NDP probes on IPoIB link {ifname}")
        return link

    def conflict(
        self,
        ifname: str,
        ip: str,
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> ProbeAnswer | None:
        self.k._enter("conflict", ifname, ip, netns)
        self._ready(ifname, netns)
        mac = self.k.wire.get(ip)
        return ProbeAnswer(ip, mac) if mac else None

    def gateway(
        self,
        ifname: str,
        ip: str,
        gateway: str,
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> ProbeAnswer | None:
        self.k._enter("gateway", ifname, gateway, netns)
        self._ready(ifname, netns)
        mac = self.k.wire.get(gateway)
        return ProbeAnswer(gateway, mac) if mac else None

    def probe_nic(
        self,
        ifname: str,
        ips: Sequence[str],
        gateways: Sequence[GatewayCheck],
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> NicProbeReport:
        self.k._enter("probe_nic", ifname, netns)
        self._ready(ifname, netns)
        for ip in ips:
            if ip in self.k.wire:
                return NicProbeReport(conflict=ProbeAnswer(ip, self.k.wire[ip]))
        answers = []
        for check in gateways:
            mac = self.k.wire.get(check.gateway)
            answers.append((check, ProbeAnswer(check.gateway, mac) if mac else None))
        return NicProbeReport(gateways=tuple(answers))

    def announce(self, ifname: str, ips: Sequence[str], netns: NetnsPath) -> None:
        self.k._enter("announce", ifname, netns)
        self.k.announced.append((ifname, tuple(ips), netns))


# ------------------------------------------------------------------- VfOps


class FakeVfOps:
    """``VfOps``: the PFs' VF tables, keyed by the PF netdev as the kernel is."""

    def __init__(self, k: FakeKernel) -> None:
        self.k = k

    def _entry(self, op: str, pf: str, vf: int) -> tuple[str, VfInfo]:
        pf_pci = self.k.pf_pci_of_netdev(pf)
        ib = self.k.pci[pf_pci].ib
        if op in ETHERNET_ONLY and ib:
            raise NotSupported(
                f"{pf}: IPoIB PF cannot set VF {ETHERNET_ONLY[op]}",
                errno_mod.EOPNOTSUPP,
            )
        if op in IB_ONLY and not ib:
            raise NotSupported(
                f"{pf}: Ethernet PF cannot set VF {IB_ONLY[op]}",
                errno_mod.EOPNOTSUPP,
            )
        table = self.k.vf_tables[pf_pci]
        if vf not in table:
            raise DeviceNotFound(f"PF {pf} has no VF {vf} (VFs: {sorted(table)})")
        return pf_pci, table[vf]

    def _set(self, op: str, pf: str, vf: int, **changes: object) -> None:
        self.k._enter(op, pf, vf)
        pf_pci, entry = self._entry(op, pf, vf)
        self.k.vf_tables[pf_pci][vf] = replace(entry, **changes)  # type: ignore[arg-type]

    def get_vf(self, pf: str, vf: int) -> VfInfo:
        self.k._enter("get_vf", pf, vf)
        return self._entry("get_vf", pf, vf)[1]

    def set_vlan(self, pf: str, vf: int, vlan: int, qos: int, proto: int) -> None:
        if not 0 <= vlan <= 4094 or not 0 <= qos <= 7:
            raise InvalidArgument(f"vlan {vlan} qos {qos}", errno_mod.ERANGE)
        self._set("set_vf_vlan", pf, vf, vlan=vlan, qos=qos, vlan_proto=proto)

    def set_mac(self, pf: str, vf: int, mac: str) -> None:
        self._set("set_vf_mac", pf, vf, mac=mac.lower())

    def set_rate(self, pf: str, vf: int, min_tx: int, max_tx: int) -> None:
        if max_tx and min_tx > max_tx:
            raise InvalidArgument(f"min_tx_rate {min_tx} > max {max_tx}")
        self._set("set_vf_rate", pf, vf, min_tx_rate=min_tx, max_tx_rate=max_tx)

    def set_spoofchk(self, pf: str, vf: int, on: bool) -> None:
        self._set("set_vf_spoofchk", pf, vf, spoofchk=on)

    def set_trust(self, pf: str, vf: int, on: bool) -> None:
        self._set("set_vf_trust", pf, vf, trust=on)

    def set_link_state(self, pf: str, vf: int, state: int) -> None:
        self._set("set_vf_link_state", pf, vf, link_state=state)

    def set_node_guid(self, pf: str, vf: int, guid: str) -> None:
        self._set("set_vf_node_guid", pf, vf, node_guid=guid.lower())

    def set_port_guid(self, pf: str, vf: int, guid: str) -> None:
        self._set("set_vf_port_guid", pf, vf, port_guid=guid.lower())

    def rebind(self, pci: str) -> None:
        """Unbind + bind: the netdev and RDMA device are recreated in the host.

        The netdev gets a new ifindex, the default MTU and (IPoIB) a hardware
        address carrying the current port GUID; its name is the next of
        ``PciFunction.rebind_names`` if any (udev naming it anew), else the
        old one. The RDMA device comes back in the host, possibly renamed.
        """
        self.k._enter("rebind", pci)
        fn = self.k.pci.get(pci)
        if fn is None or fn.driver is None:
            raise DeviceNotFound(f"{pci} is not bound to a driver: nothing to rebind")
        found = self.k.where_is(pci)
        name = None
        if found is not None:
            path, link = found
            del self.k.namespaces[path].links[link.name]
            name = link.name
        if fn.rebind_names:
            name = fn.rebind_names.pop(0)
        if name is not None:
            new = self.k.add_link(name, kind=None, pci=pci, mtu=fn.default_mtu)
            if fn.ib:
                new.link_type = ARPHRD_INFINIBAND
                assert fn.pf_pci is not None and fn.vf_index is not None
                entry = self.k.vf_tables[fn.pf_pci][fn.vf_index]
                new.mac = _ipoib_mac(entry.port_guid)
        for dev in self.k.rdma_devices.values():
            if dev.pci == pci:
                dev.netns = None


# ------------------------------------------------------------------ RdmaOps


class FakeRdma:
    """``RdmaOps``: exclusive mode hides a device outside the caller's netns."""

    def __init__(self, k: FakeKernel) -> None:
        self.k = k

    def netns_mode(self) -> str:
        self.k._enter("netns_mode")
        if self.k.rdma_mode == "unsupported":
            raise NotSupported("this host has no RDMA netlink support")
        return self.k.rdma_mode

    def devices(self, netns: NetnsPath = None) -> list[str]:
        self.k._enter("rdma_devices", netns)
        self.k._ns(netns)
        key = None if netns in HOST_PATHS else netns
        return sorted(
            d.name
            for d in self.k.rdma_devices.values()
            if self.k.rdma_mode == "shared" or d.netns == key
        )

    def move(self, dev: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        self.k._enter("rdma_move", dev, to_netns, netns)
        self.k._ns(to_netns)
        self.k._ns(netns)
        if self.k.rdma_mode != "exclusive":
            raise NotSupported("RDMA devices move only in exclusive netns mode")
        entry = self.k.rdma_devices.get(dev)
        if entry is None or entry.netns != netns:
            where = netns or "the host netns"
            raise DeviceNotFound(f"RDMA device {dev} not found in {where}")
        entry.netns = None if to_netns in HOST_PATHS else to_netns

    def rename(self, dev: str, new_name: str, netns: NetnsPath = None) -> None:
        self.k._enter("rdma_rename", dev, new_name, netns)
        self.k._ns(netns)
        entry = self.k.rdma_devices.get(dev)
        if entry is None or entry.netns != (None if netns in HOST_PATHS else netns):
            raise DeviceNotFound(f"RDMA device {dev} not found")
        if new_name in self.k.rdma_devices and new_name != dev:
            raise LinkExists(f"RDMA device name {new_name} is taken", errno_mod.EEXIST)
        entry.name = new_name
        self.k.rdma_devices[new_name] = self.k.rdma_devices.pop(dev)


# -------------------------------------------------------------- DeviceWaiter


class FakeWaiter:
    """``DeviceWaiter``: the device is there at once, or ``Timeout``."""

    def __init__(self, k: FakeKernel) -> None:
        self.k = k
        self.watching = False

    @contextmanager
    def watch(self) -> Iterator[None]:
        self.watching = True
        try:
            yield
        finally:
            self.watching = False

    def wait_netdev(self, pci: str, timeout: float) -> str:
        self.k._enter("wait_netdev", pci)
        assert self.watching, "wait_netdev outside watch()"
        names = self.k.sysfs.netdevs(pci)
        if not names:
            raise Timeout(f"no netdev for {pci} within {timeout}s")
        return names[0]

    def wait_rdma(self, pci: str, timeout: float) -> str:
        self.k._enter("wait_rdma", pci)
        names = self.k.sysfs.rdma_devices(pci)
        if not names:
            raise Timeout(f"no RDMA device for {pci} within {timeout}s")
        return names[0]


# -------------------------------------------------------------------- sysfs


class FakeSysfs:
    """What ``cni.kernel.sysfs.Sysfs`` shows from the host mount.

    ``net/`` and ``infiniband/`` are namespace-tagged on a real host: a netdev
    or (exclusive mode) RDMA device in a pod is not listed.
    """

    def __init__(self, k: FakeKernel) -> None:
        self.k = k

    def _fn(self, pci: str) -> PciFunction:
        check_pci(pci)
        fn = self.k.pci.get(pci)
        if fn is None:
            raise DeviceNotFound(f"no PCI device {pci}")
        return fn

    def exists(self, pci: str) -> bool:
        return check_pci(pci) in self.k.pci

    def place(self, pci: str) -> None:
        """No PCIe topology on this host (as the simulated flat tree)."""
        self._fn(pci)

    def driver(self, pci: str) -> str | None:
        return self._fn(pci).driver

    def is_dpdk(self, pci: str) -> bool:
        return self.driver(pci) in ("vfio-pci", "uio_pci_generic", "igb_uio")

    def netdevs(self, pci: str) -> tuple[str, ...]:
        self._fn(pci)
        host = self.k.namespaces[None]
        return tuple(sorted(n for n, ln in host.links.items() if ln.pci == pci))

    def rdma_devices(self, pci: str) -> tuple[str, ...]:
        self._fn(pci)
        shared = self.k.rdma_mode == "shared"
        return tuple(
            sorted(
                d.name
                for d in self.k.rdma_devices.values()
                if d.pci == pci and (shared or d.netns is None)
            )
        )

    def is_vf(self, pci: str) -> bool:
        return self._fn(pci).pf_pci is not None

    def pf_of(self, pci: str) -> str | None:
        return self._fn(pci).pf_pci

    def vfs(self, pf_pci: str) -> dict[int, str]:
        return dict(sorted(self._fn(pf_pci).vfs.items()))

    def pfs(self) -> list[str]:
        return sorted(p for p, fn in self.k.pci.items() if fn.sriov)

    def device(self, pci: str) -> PciDevice:
        fn = self._fn(pci)
        pf_netdev = None
        if fn.pf_pci is not None:
            pf_nets = self.netdevs(fn.pf_pci)
            pf_netdev = pf_nets[0] if pf_nets else None
        return PciDevice(
            pci=pci,
            driver=fn.driver,
            netdevs=self.netdevs(pci),
            rdma_devices=self.rdma_devices(pci),
            pf_pci=fn.pf_pci,
            pf_netdev=pf_netdev,
            vf_index=fn.vf_index,
        )


# Conformance with the kernel seam, checked by mypy (Go's `var _ X = &Y{}`).
_links: type[Links] = FakeLinks
_netns: type[Netns] = FakeNetns
_probes: type[NicProbes] = FakeProbes
_vf: type[VfOps] = FakeVfOps
_rdma: type[RdmaOps] = FakeRdma
_waiter: type[DeviceWaiter] = FakeWaiter
