# SPDX-License-Identifier: Apache-2.0
"""The kernel seam: Protocols, records and domain exceptions. Nothing heavy.

This module is the contract between the plugins' domain code and everything that
touches the kernel. It must not import pyroute2, pyudev or any adapter module:
plugins import it at module top, and VERSION / config errors must stay cheap.

Adapters (each imports what it needs, pyudev among them, and is imported
lazily inside the plugins' ``real_deps()``; the RDMA one, on pyroute2, only
when a command first uses it):

- ``cni.kernel.links.NetlinkLinks`` -> ``Links`` (rtnetlink on netdevs; wire
  format in ``cni.kernel.rtnl``)
- ``cni.kernel.netns.Namespaces`` -> ``Netns`` (open/verify/temp netns)
- ``cni.kernel.probes.RawProbes`` -> ``NicProbes`` (ARP/NDP conflict, gateway, announce)
- ``cni.kernel.vf.NetlinkVfOps`` -> ``VfOps`` (PF-side IFLA_VF_*, GUIDs, rebind)
- ``cni.kernel.rdma.NetlinkRdmaOps`` -> ``RdmaOps`` (NETLINK_RDMA; the nldev
  messages, shared with the exporter, are ``cni.kernel.nldev``)
- ``cni.kernel.udev.UdevWaiter`` -> ``DeviceWaiter`` (pyudev monitor)
- ``cni.kernel.sysfs.Sysfs``          -> plain pathlib PCI discovery with a root
- the RDMA exporter's reads: ``cni.kernel.stats`` (its records and seams, the
  sysfs counters), ``cni.kernel.rdma_stats`` (nldev statistics in a pod's
  netns), ``cni.kernel.ethtool`` (SIOCETHTOOL)

``cni.kernel.cni_errors`` maps these exceptions to CNI error codes (one table).

Namespaces are named by path (``/var/run/netns/x``, ``/proc/<pid>/ns/net``).
``None`` always means the plugin process's own network namespace (the host).
Adapters never create a namespace as a side effect of opening one.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

NetnsPath = str | None


# ---------------------------------------------------------------- exceptions


class KernelError(Exception):
    """Base of every error an adapter raises; ``errno`` kept when there was one."""

    def __init__(self, msg: str, errno: int | None = None) -> None:
        super().__init__(msg)
        self.errno = errno


class LinkNotFound(KernelError):
    """No netdev of that name (or index) in the namespace asked."""


class LinkExists(KernelError):
    """A netdev of that name already exists in the target namespace (EEXIST)."""


class NetnsNotFound(KernelError):
    """The namespace path does not exist or is not a network namespace."""


class NotANetns(NetnsNotFound):
    """The path opens but is not a network namespace (a file, a FIFO, a
    namespace of another type)."""


class NotSupported(KernelError):
    """The device or kernel refuses the operation (EOPNOTSUPP, no RDMA, ...)."""


class DeviceBusy(KernelError):
    """EBUSY: the device is in use."""


class InvalidArgument(KernelError):
    """EINVAL / ERANGE: e.g. an MTU above the device maximum."""


class DeviceNotFound(KernelError):
    """A PCI or RDMA device is not where sysfs or netlink should show it."""


class Timeout(KernelError):
    """A bounded wait (udev, carrier, DAD) ran out."""


# ------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class LinkInfo:
    """What the domain code needs to know about one netdev."""

    index: int
    name: str
    mac: str  # lower-case colon hex; 20 bytes for IPoIB
    mtu: int
    up: bool  # administratively up (IFF_UP)
    kind: str | None = None  # IFLA_INFO_KIND: "veth", "bridge", None for hardware
    altnames: tuple[str, ...] = ()
    permanent_mac: str | None = None
    link_type: int = 1  # ARPHRD_*: 1 ether, 32 infiniband


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One route; ``dst`` is a CIDR ("0.0.0.0/0" for default)."""

    dst: str
    gw: str | None = None
    dev: str | None = None
    table: int = 254  # RT_TABLE_MAIN
    scope: int | None = None  # RT_SCOPE_*; None lets the adapter pick (link/universe)
    src: str | None = None
    metric: int | None = None
    mtu: int | None = None
    advmss: int | None = None
    #: RTNH_F_ONLINK: the gateway is on the link even without a route to it
    #: (``default via 169.254.1.1 dev eth0 onlink``, Calico's layout).
    onlink: bool = False
    #: RTPROT_*: who installed it (4 static, 3 boot, ...); None lets the adapter
    #: pick (boot). Kept when a route is moved or restored.
    protocol: int | None = None


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """One policy rule ``from <src> lookup <table> pref <priority>``."""

    src: str  # CIDR, e.g. "172.16.11.5/32"
    table: int
    priority: int
    family: int = 2  # AF_INET / AF_INET6 (10)


@dataclass(frozen=True, slots=True)
class VfInfo:
    """One VF's entry in the PF's IFLA_VFINFO_LIST, the state DEL restores."""

    vf: int
    mac: str = "00:00:00:00:00:00"
    vlan: int = 0
    qos: int = 0
    vlan_proto: int = 0x8100
    spoofchk: bool | None = None
    trust: bool | None = None
    link_state: int = 0  # 0 auto, 1 enable, 2 disable
    min_tx_rate: int = 0  # Mbps
    max_tx_rate: int = 0  # Mbps
    node_guid: str | None = None  # IB only, "xx:xx:..:xx" (8 bytes)
    port_guid: str | None = None


@dataclass(frozen=True, slots=True)
class PciDevice:
    """A PCI function as sysfs shows it from the host."""

    pci: str  # "0000:af:00.2"
    driver: str | None  # basename of the driver link, None if unbound
    netdevs: tuple[str, ...] = ()  # entries under net/ visible from this mount
    rdma_devices: tuple[str, ...] = ()  # entries under infiniband/
    pf_pci: str | None = None  # via physfn; None for a PF or a non-SR-IOV device
    pf_netdev: str | None = None
    vf_index: int | None = None  # N of the PF's virtfnN pointing here


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    """Who answered an ARP/NDP probe."""

    ip: str
    mac: str


@dataclass(frozen=True, slots=True)
class GatewayCheck:
    """One gateway probe: from the pod address ``ip`` to ``gateway``."""

    ip: str
    gateway: str


@dataclass(frozen=True, slots=True)
class NicProbeReport:
    """What ``NicProbes.probe_nic`` found on one netdev.

    ``conflict``: another host answering for one of the probed addresses (the
    first found; probing stops there), else None. ``gateways``: each
    ``GatewayCheck`` that ran, with the gateway's answer or None when it stayed
    silent for every try; a check never sent (a conflict stopped the probing)
    is absent.
    """

    conflict: ProbeAnswer | None = None
    gateways: tuple[tuple[GatewayCheck, ProbeAnswer | None], ...] = ()


# ------------------------------------------------------------------ protocols


class Links(Protocol):
    """rtnetlink on netdevs, one kernel operation per method.

    ``netns`` selects where the operation runs; None = the plugin's own netns.
    Errno is translated: ENODEV -> LinkNotFound, EEXIST -> LinkExists,
    EOPNOTSUPP -> NotSupported, EINVAL/ERANGE -> InvalidArgument,
    EBUSY -> DeviceBusy; a missing netns path -> NetnsNotFound.
    """

    def get(self, name: str, netns: NetnsPath = None) -> LinkInfo: ...
    def find(self, name: str, netns: NetnsPath = None) -> LinkInfo | None: ...
    def list(self, netns: NetnsPath = None) -> builtins.list[LinkInfo]: ...
    def set_up(self, name: str, netns: NetnsPath = None) -> None: ...
    def set_down(self, name: str, netns: NetnsPath = None) -> None: ...
    def rename(self, name: str, new_name: str, netns: NetnsPath = None) -> None: ...
    def set_mtu(self, name: str, mtu: int, netns: NetnsPath = None) -> None: ...
    def set_mac(self, name: str, mac: str, netns: NetnsPath = None) -> None: ...
    def del_altname(self, name: str, altname: str, netns: NetnsPath = None) -> None: ...

    def move(self, name: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        """Move ``name`` from ``netns`` into ``to_netns`` (None = plugin's netns)."""
        ...

    def move_renamed(
        self, index: int, to_netns: NetnsPath, pattern: str, netns: NetnsPath = None
    ) -> str:
        """Move link ``index`` renamed to a free name from ``pattern`` ("x%d"),
        or to ``pattern`` itself when it has no "%d" (LinkExists if taken)."""
        ...

    def addresses(self, name: str, netns: NetnsPath = None) -> builtins.list[str]:
        """Global-scope addresses as CIDR strings ("172.16.11.5/24")."""
        ...

    def add_address(
        self,
        name: str,
        cidr: str,
        netns: NetnsPath = None,
        *,
        noprefixroute: bool = False,
        nodad: bool = False,
    ) -> None:
        """Add ``cidr``; ``noprefixroute`` skips the kernel's subnet route in main,
        ``nodad`` skips IPv6 DAD (our own NDP probe runs right after)."""
        ...

    def del_address(self, name: str, cidr: str, netns: NetnsPath = None) -> None: ...
    def flush_addresses(self, name: str, netns: NetnsPath = None) -> None: ...
    def add_route(self, route: RouteSpec, netns: NetnsPath = None) -> None: ...
    def del_route(self, route: RouteSpec, netns: NetnsPath = None) -> None: ...

    def routes(
        self, table: int = 254, family: int = 0, netns: NetnsPath = None
    ) -> builtins.list[RouteSpec]: ...

    def add_rule(self, rule: RuleSpec, netns: NetnsPath = None) -> None: ...
    def del_rule(self, rule: RuleSpec, netns: NetnsPath = None) -> None: ...
    def rules(
        self, family: int = 0, netns: NetnsPath = None
    ) -> builtins.list[RuleSpec]: ...

    def set_sysctl(self, key: str, value: str, netns: NetnsPath = None) -> None:
        """Write /proc/sys/<key> ("net/ipv4/conf/net1/arp_notify") inside netns."""
        ...

    def close(self) -> None:
        """Release every socket or fd opened for this command."""
        ...


class Netns(Protocol):
    """Namespace handles. Never creates a namespace by opening a path."""

    def exists(self, path: str) -> bool: ...

    def check(self, path: str) -> None:
        """Raise NetnsNotFound unless ``path`` is an existing network namespace."""
        ...

    def is_current(self, path: str) -> bool:
        """True when ``path`` is the plugin's own netns (spec code 8 otherwise ok)."""
        ...

    def temporary(self) -> AbstractContextManager[str]:
        """A fresh, empty netns for the duration of the block; yields its path.

        Used to rename a VF away from the host (udev races with renames there).
        On exit any netdev still inside is moved back to the plugin's netns
        before the namespace is destroyed, so a physical device is never lost.
        """
        ...


class Probes(Protocol):
    """ARP (IPv4) and NDP (IPv6) probes on a netdev inside a netns.

    Each call is bounded: ``tries`` sends, ``interval`` seconds of waiting each.
    IPoIB netdevs (link_type 32) use 20-byte hardware addresses.
    """

    def conflict(
        self,
        ifname: str,
        ip: str,
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> ProbeAnswer | None:
        """Another host answering for ``ip`` (DAD-style probe), or None."""
        ...

    def gateway(
        self,
        ifname: str,
        ip: str,
        gateway: str,
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> ProbeAnswer | None:
        """The gateway's answer to a probe from ``ip``, or None if it is silent."""
        ...

    def announce(self, ifname: str, ips: Sequence[str], netns: NetnsPath) -> None:
        """Gratuitous ARP / unsolicited NA for each address; errors are logged."""
        ...


class NicProbes(Probes, Protocol):
    """``Probes`` that check every address of a NIC at once (added in 0.1).

    Optional: callers use ``probe_nic`` when the adapter has it and fall back to
    ``conflict``/``gateway`` one by one otherwise.
    """

    def probe_nic(
        self,
        ifname: str,
        ips: Sequence[str],
        gateways: Sequence[GatewayCheck],
        netns: NetnsPath,
        tries: int = 3,
        interval: float = 0.1,
    ) -> NicProbeReport:
        """Conflict probes for ``ips`` and ``gateways`` probes, families in parallel.

        Within one address family every conflict probe ends (``tries`` x
        ``interval`` of silence) before a gateway probe of that family is sent:
        a probe from an address another host holds would teach the gateway our
        MAC for it. IPv4 and IPv6 run concurrently, so a dual-stack NIC waits
        once. Raises NotSupported where ARP/NDP cannot run (IPoIB).
        """
        ...


class VfOps(Protocol):
    """What only the PF (or the PCI core) can do to a VF; the kernel here cannot.

    The real side builds RTM_SETLINK/GETLINK messages on the PF with
    IFLA_VFINFO_LIST, and writes driver unbind/bind in sysfs. The simulated
    host records the calls and keeps the VF table in a state file.
    """

    def get_vf(self, pf: str, vf: int) -> VfInfo: ...
    def set_vlan(self, pf: str, vf: int, vlan: int, qos: int, proto: int) -> None: ...
    def set_mac(self, pf: str, vf: int, mac: str) -> None: ...
    def set_rate(self, pf: str, vf: int, min_tx: int, max_tx: int) -> None: ...
    def set_spoofchk(self, pf: str, vf: int, on: bool) -> None: ...
    def set_trust(self, pf: str, vf: int, on: bool) -> None: ...
    def set_link_state(self, pf: str, vf: int, state: int) -> None: ...
    def set_node_guid(self, pf: str, vf: int, guid: str) -> None: ...
    def set_port_guid(self, pf: str, vf: int, guid: str) -> None: ...

    def rebind(self, pci: str) -> None:
        """Unbind and re-bind the VF's driver so a new GUID takes effect.

        Returns once the bind was written; the netdev comes back asynchronously
        (wait with DeviceWaiter), possibly under another name.
        """
        ...


class RdmaOps(Protocol):
    """NETLINK_RDMA nldev: netns mode and moving RDMA devices between netns."""

    def netns_mode(self) -> str:
        """ "exclusive" or "shared"; NotSupported when the host has no RDMA."""
        ...

    def devices(self, netns: NetnsPath = None) -> list[str]:
        """RDMA device names visible from netns (exclusive mode filters by netns)."""
        ...

    def move(self, dev: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        """Move RDMA device ``dev`` (seen from ``netns``) into ``to_netns``."""
        ...

    def rename(self, dev: str, new_name: str, netns: NetnsPath = None) -> None:
        """Rename RDMA device ``dev`` (seen from ``netns``) to ``new_name``.

        LinkExists when the kernel has a device of that name (EEXIST: on
        released kernels RDMA device names are unique per host, not per netns).
        """
        ...


@dataclass(frozen=True, slots=True)
class PortTos:
    """One RDMA port's RoCE marking: rdma_cm's ``default_roce_tos`` and the
    device's ``tc/<port>/traffic_class`` (None: not set; absent: the device
    has no such file)."""

    port: int
    roce_tos: int | None
    traffic_class: int | None
    has_traffic_class: bool


@dataclass(frozen=True, slots=True)
class RoceTosState:
    """A device's RoCE marking as found before a change, to put back."""

    group_existed: bool  # the rdma_cm configfs group was there before
    ports: tuple[PortTos, ...]


class RoceTos(Protocol):
    """The RoCE TOS of an RDMA device: configfs ``rdma_cm`` and sysfs ``tc/``."""

    def read(self, dev: str, pci: str) -> RoceTosState: ...

    def apply(self, dev: str, pci: str, tos: int) -> None:
        """Set ``tos`` on every port; nothing is left half-set on failure."""
        ...

    def restore(self, dev: str, pci: str, before: RoceTosState) -> None: ...


class DeviceWaiter(Protocol):
    """Bounded wait for a PCI function's netdev / RDMA device to (re)appear."""

    def watch(self) -> AbstractContextManager[None]:
        """Start listening *before* the action that triggers the event."""
        ...

    def wait_netdev(self, pci: str, timeout: float) -> str:
        """Block until sysfs shows a netdev under the PCI function; its name.

        Raises Timeout. Must be called inside ``watch()``.
        """
        ...

    def wait_rdma(self, pci: str, timeout: float) -> str: ...
