# SPDX-License-Identifier: Apache-2.0
"""``Links`` adapter: rtnetlink on netdevs, addresses, routes and rules via pyroute2.

May import: the standard library, pyroute2 (this module is only imported lazily,
inside ``real_deps()``), ``cni.kernel`` and ``cni.kernel.netns``.

Design:
- One hand-built netlink message per method (pyroute2 message classes, sent with
  ``AsyncIPRoute.nlm_request``), errno translated to the contract's exceptions.
  Methods that need an ifindex the kernel cannot look up by name (addresses,
  routes) do one RTM_GETLINK first.
- One rtnetlink socket per namespace, cached for the adapter's life, keyed by the
  namespace's nsfs inode (not by path: a path can be re-used by another netns).
  The socket is created after setns(2) into the target on this thread and the
  thread switched back (~1 ms), instead of pyroute2's forking helper (~12 ms).
  A socket keeps its namespace alive, so ``close()`` (and ``forget()``) matter.
- A missing namespace path is ``NetnsNotFound``; nothing is ever created.

Contract extensions (optional keywords / extra methods, all backward compatible):
``add_address(..., noprefixroute=False, nodad=False)``, ``forget(netns)``,
``move_renamed(index, to_netns, pattern, netns)``.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import ipaddress
import os
import socket
import struct
from collections import Counter
from typing import Any

from pyroute2 import AsyncIPRoute
from pyroute2.netlink import (
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_DUMP_INTR,
    NLM_F_EXCL,
    NLM_F_REQUEST,
)
from pyroute2.netlink.exceptions import NetlinkDumpInterrupted, NetlinkError
from pyroute2.netlink.rtnl import (
    RTM_DELADDR,
    RTM_DELLINKPROP,
    RTM_DELROUTE,
    RTM_DELRULE,
    RTM_GETADDR,
    RTM_GETLINK,
    RTM_GETROUTE,
    RTM_GETRULE,
    RTM_NEWADDR,
    RTM_NEWROUTE,
    RTM_NEWRULE,
    RTM_SETLINK,
)
from pyroute2.netlink.rtnl.fibmsg import fibmsg
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from cni.kernel import (
    DeviceBusy,
    InvalidArgument,
    KernelError,
    LinkExists,
    LinkInfo,
    LinkNotFound,
    NetnsNotFound,
    NetnsPath,
    NotSupported,
    RouteSpec,
    RuleSpec,
)
from cni.kernel.netns import (
    OWN_NETNS,
    in_netns_fd,
    netns_key,
    open_netns,
    register_cache,
)

IFF_UP = 0x1
IFLA_ADDRESS = 1  # include/uapi/linux/if_link.h
IFLA_PERM_ADDRESS = 54
IFA_F_NODAD = 0x02
IFA_F_NOPREFIXROUTE = 0x200
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_LINK = 253
RT_SCOPE_NOWHERE = 255  # a wildcard in deletes
RT_TABLE_COMPAT = 252
RTN_UNICAST = 1
RTPROT_BOOT = 3
FR_ACT_TO_TBL = 1
RTEXT_FILTER_SKIP_STATS = 1 << 3  # smaller RTM_NEWLINK replies; older kernels ignore it
DUMP_ATTEMPTS = 5
_IP_FAMILIES = (socket.AF_INET, socket.AF_INET6)

_ERRNO_TO_EXC: dict[int, type[KernelError]] = {
    errno.ENODEV: LinkNotFound,
    errno.EEXIST: LinkExists,
    errno.EOPNOTSUPP: NotSupported,
    errno.EINVAL: InvalidArgument,
    errno.ERANGE: InvalidArgument,
    errno.EBUSY: DeviceBusy,
}


def errno_error(code: int, what: str) -> KernelError:
    """The contract exception for a positive errno (kept on the exception)."""
    cls = _ERRNO_TO_EXC.get(code, KernelError)
    return cls(f"{what}: {os.strerror(code)}", code)


def translate(exc: NetlinkError, what: str) -> KernelError:
    """The contract exception for a pyroute2 netlink error."""
    return errno_error(abs(exc.code), what)


class _Channel:
    """One rtnetlink socket bound to one namespace, driven on a shared event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # The socket is created here, in whatever netns the thread is in now.
        self._ipr = AsyncIPRoute(use_event_loop=loop)
        loop.run_until_complete(self._ipr.setup_endpoint())

    def request(self, msg: Any, msg_type: int, flags: int) -> list[Any]:
        async def run() -> list[Any]:
            return [m async for m in await self._ipr.nlm_request(msg, msg_type, flags)]

        return self._loop.run_until_complete(run())

    def close(self) -> None:
        self._ipr.close()


def _link_msg(name: str | None = None, index: int = 0) -> ifinfmsg:
    msg = ifinfmsg()
    msg["family"] = socket.AF_UNSPEC
    msg["index"] = index
    msg["flags"] = 0
    msg["change"] = 0
    msg["attrs"] = [("IFLA_IFNAME", name)] if name is not None else []
    return msg


def _hw_addresses(msg: Any) -> dict[int, str]:
    """IFLA_ADDRESS / IFLA_PERM_ADDRESS straight from the message bytes.

    pyroute2 decodes IFLA_ADDRESS as exactly 6 bytes; an IPoIB address has 20
    (the GUID is its last 8), so the attributes are read from the raw message.
    """
    raw = bytes(msg.data[msg.offset : msg.offset + msg.length])
    out: dict[int, str] = {}
    offset = 32  # struct nlmsghdr + struct ifinfomsg
    while offset + 4 <= len(raw):
        length, kind = struct.unpack_from("=HH", raw, offset)
        if length < 4:
            break
        if kind & 0x3FFF in (IFLA_ADDRESS, IFLA_PERM_ADDRESS):
            value = raw[offset + 4 : offset + length]
            out[kind & 0x3FFF] = ":".join(f"{b:02x}" for b in value)
        offset += (length + 3) & ~3
    return out


def _link_info(msg: Any) -> LinkInfo:
    kind = None
    linkinfo = msg.get_attr("IFLA_LINKINFO")
    if linkinfo is not None:
        kind = linkinfo.get_attr("IFLA_INFO_KIND")
    altnames: tuple[str, ...] = ()
    props = msg.get_attr("IFLA_PROP_LIST")
    if props is not None:
        altnames = tuple(props.get_attrs("IFLA_ALT_IFNAME"))
    hw = _hw_addresses(msg)
    perm = hw.get(IFLA_PERM_ADDRESS)
    return LinkInfo(
        index=msg["index"],
        name=msg.get_attr("IFLA_IFNAME"),
        mac=hw.get(IFLA_ADDRESS, ""),
        mtu=msg.get_attr("IFLA_MTU") or 0,
        up=bool(msg["flags"] & IFF_UP),
        kind=kind,
        altnames=altnames,
        permanent_mac=perm if perm and perm.strip("0:") else None,
        link_type=msg["ifi_type"],
    )


class PyRoute2Links:
    """``Links`` on real rtnetlink; see the module doc for the socket discipline."""

    def __init__(self) -> None:
        # The plugin's own netns, fixed now: after a setns, /proc/thread-self moves.
        self._own_fd = open_netns(OWN_NETNS)
        self._own_key = netns_key(OWN_NETNS)
        self._loop = asyncio.new_event_loop()
        self._channels: dict[tuple[int, int], _Channel] = {}
        # Requests sent, by message type (RTM_*): what a command costs in netlink.
        self.requests: Counter[int] = Counter()
        self._closed = False
        register_cache(self)

    # ------------------------------------------------------------ sockets

    def _channel(self, netns: NetnsPath) -> _Channel:
        if self._closed:
            raise KernelError("links adapter used after close()")
        key = self._own_key if netns is None else netns_key(netns)
        chan = self._channels.get(key)
        if chan is not None:
            return chan
        if key == self._own_key:
            fd = os.dup(self._own_fd)
        else:
            fd = open_netns(netns)  # type: ignore[arg-type]  # netns is a str here
        try:
            chan = self._open_channel(fd)
        finally:
            os.close(fd)
        self._channels[key] = chan
        return chan

    def _open_channel(self, netns_fd: int) -> _Channel:
        """A socket created inside ``netns_fd`` (setns there and back, no fork)."""
        with in_netns_fd(netns_fd):
            return _Channel(self._loop)

    def _request(
        self, netns: NetnsPath, msg: Any, msg_type: int, flags: int, what: str
    ) -> list[Any]:
        chan = self._channel(netns)
        self.requests[msg_type] += 1
        try:
            return chan.request(msg, msg_type, flags)
        except NetlinkError as exc:
            raise translate(exc, what) from exc

    def _dump(
        self, netns: NetnsPath, msg_factory: Any, msg_type: int, what: str
    ) -> list[Any]:
        """A dump, retried while the kernel flags it inconsistent (NLM_F_DUMP_INTR:
        the table changed under it); pyroute2 0.9.7 only sets the header flag."""
        chan = self._channel(netns)
        for _ in range(DUMP_ATTEMPTS):
            self.requests[msg_type] += 1
            try:
                msgs = chan.request(msg_factory(), msg_type, NLM_F_REQUEST | NLM_F_DUMP)
            except NetlinkDumpInterrupted:
                continue
            except NetlinkError as exc:
                raise translate(exc, what) from exc
            if not any(m["header"]["flags"] & NLM_F_DUMP_INTR for m in msgs):
                return msgs
        raise KernelError(f"{what}: dump interrupted {DUMP_ATTEMPTS} times in a row")

    def forget(self, netns: str) -> None:
        """Close the cached socket for ``netns`` (lets a dying netns be freed)."""
        try:
            key = netns_key(netns)
        except NetnsNotFound:
            return
        chan = self._channels.pop(key, None)
        if chan is not None:
            chan.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for chan in self._channels.values():
            chan.close()
        self._channels.clear()
        self._loop.close()
        os.close(self._own_fd)

    # -------------------------------------------------------------- links

    def _getlink(self, name: str, netns: NetnsPath) -> Any:
        msg = _link_msg(name)
        msg["attrs"].append(("IFLA_EXT_MASK", RTEXT_FILTER_SKIP_STATS))
        where = f" in {netns}" if netns else ""
        return self._request(
            netns, msg, RTM_GETLINK, NLM_F_REQUEST, f"link {name}{where}"
        )[0]

    def _index(self, name: str, netns: NetnsPath) -> int:
        return int(self._getlink(name, netns)["index"])

    def get(self, name: str, netns: NetnsPath = None) -> LinkInfo:
        return _link_info(self._getlink(name, netns))

    def find(self, name: str, netns: NetnsPath = None) -> LinkInfo | None:
        try:
            return self.get(name, netns)
        except LinkNotFound:
            return None

    def list(self, netns: NetnsPath = None) -> list[LinkInfo]:
        def factory() -> ifinfmsg:
            msg = _link_msg()
            msg["attrs"].append(("IFLA_EXT_MASK", RTEXT_FILTER_SKIP_STATS))
            return msg

        return [_link_info(m) for m in self._dump(netns, factory, RTM_GETLINK, "links")]

    def _setlink(self, msg: ifinfmsg, netns: NetnsPath, what: str) -> None:
        self._request(netns, msg, RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK, what)

    def set_up(self, name: str, netns: NetnsPath = None) -> None:
        msg = _link_msg(name)
        msg["flags"] = IFF_UP
        msg["change"] = IFF_UP
        self._setlink(msg, netns, f"set {name} up")

    def set_down(self, name: str, netns: NetnsPath = None) -> None:
        msg = _link_msg(name)
        msg["change"] = IFF_UP
        self._setlink(msg, netns, f"set {name} down")

    def rename(self, name: str, new_name: str, netns: NetnsPath = None) -> None:
        # IFLA_IFNAME is the new name here, so the device must be named by index.
        msg = _link_msg(new_name, index=self._index(name, netns))
        self._setlink(msg, netns, f"rename {name} to {new_name}")

    def set_mtu(self, name: str, mtu: int, netns: NetnsPath = None) -> None:
        msg = _link_msg(name)
        msg["attrs"].append(("IFLA_MTU", mtu))
        self._setlink(msg, netns, f"set {name} mtu {mtu}")

    def set_mac(self, name: str, mac: str, netns: NetnsPath = None) -> None:
        msg = _link_msg(name)
        msg["attrs"].append(("IFLA_ADDRESS", mac.lower()))
        self._setlink(msg, netns, f"set {name} address {mac}")

    def del_altname(self, name: str, altname: str, netns: NetnsPath = None) -> None:
        msg = _link_msg(name)
        msg["attrs"].append(
            ("IFLA_PROP_LIST", {"attrs": [("IFLA_ALT_IFNAME", altname)]})
        )
        self._request(
            netns,
            msg,
            RTM_DELLINKPROP,
            NLM_F_REQUEST | NLM_F_ACK,
            f"delete altname {altname} of {name}",
        )

    def _target_fd(self, to_netns: NetnsPath) -> int:
        return os.dup(self._own_fd) if to_netns is None else open_netns(to_netns)

    def move(self, name: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        fd = self._target_fd(to_netns)
        try:
            msg = _link_msg(name)
            msg["attrs"].append(("IFLA_NET_NS_FD", fd))
            self._setlink(msg, netns, f"move {name} to {to_netns or 'the host netns'}")
        finally:
            os.close(fd)

    def move_renamed(
        self, index: int, to_netns: NetnsPath, pattern: str, netns: NetnsPath = None
    ) -> str:
        """Move link ``index`` and rename it to ``pattern`` ("x%d" allowed); new name.

        For when the name is taken in the target: the kernel allocates a free name
        from the pattern in the same operation, so the device is never stranded.
        """
        fd = self._target_fd(to_netns)
        try:
            msg = _link_msg(pattern, index=index)
            msg["attrs"].append(("IFLA_NET_NS_FD", fd))
            self._setlink(msg, netns, f"move link {index} as {pattern}")
        finally:
            os.close(fd)
        # The kernel keeps the ifindex unless the target netns already uses it.
        prefix = pattern.split("%", 1)[0]
        names = [ln.name for ln in self.list(to_netns) if ln.name.startswith(prefix)]
        for link in self.list(to_netns):
            if link.index == index and link.name in names:
                return link.name
        return names[-1] if names else pattern

    # ---------------------------------------------------------- addresses

    def _addr_dump(self, netns: NetnsPath, index: int) -> builtins.list[Any]:
        def factory() -> ifaddrmsg:
            msg = ifaddrmsg()
            msg["family"] = socket.AF_UNSPEC
            return msg

        return [
            m
            for m in self._dump(netns, factory, RTM_GETADDR, "addresses")
            if m["index"] == index
        ]

    @staticmethod
    def _addr_cidr(msg: Any) -> str:
        addr = msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS")
        return f"{addr}/{msg['prefixlen']}"

    def addresses(self, name: str, netns: NetnsPath = None) -> builtins.list[str]:
        index = self._index(name, netns)
        return [
            self._addr_cidr(m)
            for m in self._addr_dump(netns, index)
            if m["scope"] == RT_SCOPE_UNIVERSE
        ]

    def _addr_msg(self, index: int, cidr: str) -> ifaddrmsg:
        iface = ipaddress.ip_interface(cidr)
        msg = ifaddrmsg()
        msg["family"] = socket.AF_INET6 if iface.version == 6 else socket.AF_INET
        msg["prefixlen"] = iface.network.prefixlen
        msg["flags"] = 0
        msg["scope"] = RT_SCOPE_UNIVERSE
        msg["index"] = index
        addr = str(iface.ip)
        msg["attrs"] = [("IFA_LOCAL", addr), ("IFA_ADDRESS", addr)]
        if iface.version == 4 and iface.network.prefixlen < 31:
            # As iproute2 "brd +" and Go's netlink.AddrAdd do.
            msg["attrs"].append(("IFA_BROADCAST", str(iface.network.broadcast_address)))
        return msg

    def add_address(
        self,
        name: str,
        cidr: str,
        netns: NetnsPath = None,
        *,
        noprefixroute: bool = False,
        nodad: bool = False,
    ) -> None:
        """Add ``cidr``; ``noprefixroute`` skips the kernel's subnet route
        (IFA_F_NOPREFIXROUTE), for policy routing that puts it in another table;
        ``nodad`` skips IPv6 duplicate address detection."""
        msg = self._addr_msg(self._index(name, netns), cidr)
        flags = (IFA_F_NOPREFIXROUTE if noprefixroute else 0) | (
            IFA_F_NODAD if nodad else 0
        )
        if flags:
            msg["attrs"].append(("IFA_FLAGS", flags))
        self._request(
            netns,
            msg,
            RTM_NEWADDR,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            f"add address {cidr} to {name}",
        )

    def del_address(self, name: str, cidr: str, netns: NetnsPath = None) -> None:
        msg = self._addr_msg(self._index(name, netns), cidr)
        self._request(
            netns,
            msg,
            RTM_DELADDR,
            NLM_F_REQUEST | NLM_F_ACK,
            f"delete address {cidr} from {name}",
        )

    def flush_addresses(self, name: str, netns: NetnsPath = None) -> None:
        """Delete every global-scope address (what ``addresses()`` lists)."""
        index = self._index(name, netns)
        for m in self._addr_dump(netns, index):
            if m["scope"] != RT_SCOPE_UNIVERSE:
                continue
            cidr = self._addr_cidr(m)
            try:
                self._request(
                    netns,
                    self._addr_msg(index, cidr),
                    RTM_DELADDR,
                    NLM_F_REQUEST | NLM_F_ACK,
                    f"delete address {cidr} from {name}",
                )
            except KernelError as exc:
                # Deleting a primary IPv4 address also removes its secondaries.
                if exc.errno != errno.EADDRNOTAVAIL:
                    raise

    # ------------------------------------------------------------- routes

    def _route_msg(self, route: RouteSpec, netns: NetnsPath) -> rtmsg:
        dst = ipaddress.ip_network(route.dst, strict=False)
        family = socket.AF_INET6 if dst.version == 6 else socket.AF_INET
        msg = rtmsg()
        msg["family"] = family
        msg["dst_len"] = dst.prefixlen
        msg["src_len"] = 0
        msg["tos"] = 0
        msg["table"] = route.table if route.table < 256 else RT_TABLE_COMPAT
        msg["proto"] = RTPROT_BOOT
        if route.scope is not None:
            msg["scope"] = route.scope
        else:
            msg["scope"] = RT_SCOPE_UNIVERSE if route.gw else RT_SCOPE_LINK
        msg["type"] = RTN_UNICAST
        attrs: list[tuple[str, Any]] = [("RTA_TABLE", route.table)]
        if dst.prefixlen:
            attrs.append(("RTA_DST", str(dst.network_address)))
        if route.gw:
            attrs.append(("RTA_GATEWAY", route.gw))
        if route.dev:
            attrs.append(("RTA_OIF", self._index(route.dev, netns)))
        if route.src:
            attrs.append(("RTA_PREFSRC", route.src))
        if route.metric is not None:
            attrs.append(("RTA_PRIORITY", route.metric))
        metrics = []
        if route.mtu:
            metrics.append(("RTAX_MTU", route.mtu))
        if route.advmss:
            metrics.append(("RTAX_ADVMSS", route.advmss))
        if metrics:
            attrs.append(("RTA_METRICS", {"attrs": metrics}))
        msg["attrs"] = attrs
        return msg

    def add_route(self, route: RouteSpec, netns: NetnsPath = None) -> None:
        self._request(
            netns,
            self._route_msg(route, netns),
            RTM_NEWROUTE,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            f"add route {route.dst} table {route.table}",
        )

    def del_route(self, route: RouteSpec, netns: NetnsPath = None) -> None:
        msg = self._route_msg(route, netns)
        # Match any protocol and (unless given) any scope, as "ip route del" does.
        msg["proto"] = 0
        if route.scope is None:
            msg["scope"] = RT_SCOPE_NOWHERE
        self._request(
            netns,
            msg,
            RTM_DELROUTE,
            NLM_F_REQUEST | NLM_F_ACK,
            f"delete route {route.dst} table {route.table}",
        )

    def routes(
        self, table: int = 254, family: int = 0, netns: NetnsPath = None
    ) -> builtins.list[RouteSpec]:
        def factory() -> rtmsg:
            msg = rtmsg()
            msg["family"] = family
            return msg

        dumped = self._dump(netns, factory, RTM_GETROUTE, "routes")
        names = {ln.index: ln.name for ln in self.list(netns)}
        out: list[RouteSpec] = []
        for m in dumped:
            rt_table = m.get_attr("RTA_TABLE") or m["table"]
            if rt_table != table or m["type"] != RTN_UNICAST:
                continue
            any_net = "::" if m["family"] == socket.AF_INET6 else "0.0.0.0"
            dst = m.get_attr("RTA_DST") or any_net
            metrics: dict[str, int] = {}
            raw_metrics = m.get_attr("RTA_METRICS")
            if raw_metrics is not None:
                metrics = {k: v for k, v in raw_metrics.get("attrs", [])}
            oif = m.get_attr("RTA_OIF")
            out.append(
                RouteSpec(
                    dst=f"{dst}/{m['dst_len']}",
                    gw=m.get_attr("RTA_GATEWAY"),
                    dev=names.get(oif) if oif else None,
                    table=rt_table,
                    scope=m["scope"],
                    src=m.get_attr("RTA_PREFSRC"),
                    metric=m.get_attr("RTA_PRIORITY"),
                    mtu=metrics.get("RTAX_MTU"),
                    advmss=metrics.get("RTAX_ADVMSS"),
                )
            )
        return out

    # -------------------------------------------------------------- rules

    @staticmethod
    def _rule_msg(rule: RuleSpec) -> fibmsg:
        src = ipaddress.ip_network(rule.src, strict=False)
        msg = fibmsg()
        msg["family"] = socket.AF_INET6 if src.version == 6 else socket.AF_INET
        msg["src_len"] = src.prefixlen
        msg["dst_len"] = 0
        msg["tos"] = 0
        msg["table"] = rule.table if rule.table < 256 else RT_TABLE_COMPAT
        msg["action"] = FR_ACT_TO_TBL
        msg["flags"] = 0
        attrs: list[tuple[str, Any]] = [
            ("FRA_TABLE", rule.table),
            ("FRA_PRIORITY", rule.priority),
        ]
        if src.prefixlen:
            attrs.append(("FRA_SRC", str(src.network_address)))
        msg["attrs"] = attrs
        return msg

    def add_rule(self, rule: RuleSpec, netns: NetnsPath = None) -> None:
        self._request(
            netns,
            self._rule_msg(rule),
            RTM_NEWRULE,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            f"add rule from {rule.src} lookup {rule.table} pref {rule.priority}",
        )

    def del_rule(self, rule: RuleSpec, netns: NetnsPath = None) -> None:
        self._request(
            netns,
            self._rule_msg(rule),
            RTM_DELRULE,
            NLM_F_REQUEST | NLM_F_ACK,
            f"delete rule from {rule.src} lookup {rule.table} pref {rule.priority}",
        )

    def rules(
        self, family: int = 0, netns: NetnsPath = None
    ) -> builtins.list[RuleSpec]:
        """Every IPv4/IPv6 "lookup" rule; no source reads as "0.0.0.0/0" ("::/0")."""

        def factory() -> fibmsg:
            msg = fibmsg()
            msg["family"] = family
            return msg

        out: list[RuleSpec] = []
        for m in self._dump(netns, factory, RTM_GETRULE, "rules"):
            fam = m["family"]
            # Skip goto/blackhole rules and the multicast (IPMR) families.
            if m["action"] != FR_ACT_TO_TBL or fam not in _IP_FAMILIES:
                continue
            any_net = "::" if fam == socket.AF_INET6 else "0.0.0.0"
            src = m.get_attr("FRA_SRC") or any_net
            out.append(
                RuleSpec(
                    src=f"{src}/{m['src_len']}",
                    table=m.get_attr("FRA_TABLE") or m["table"],
                    priority=m.get_attr("FRA_PRIORITY") or 0,
                    family=fam,
                )
            )
        return out

    # ------------------------------------------------------------- sysctl

    def set_sysctl(self, key: str, value: str, netns: NetnsPath = None) -> None:
        # /proc/sys/net resolves against the netns of the task doing the lookup,
        # so the file is opened after setns() and written before switching back.
        if ".." in key.split("/") or key.startswith("/"):
            raise InvalidArgument(f"sysctl key {key!r}: not a relative /proc/sys path")
        fd = self._target_fd(netns)
        try:
            with in_netns_fd(fd):
                try:
                    with open(f"/proc/sys/{key}", "w") as f:
                        f.write(value)
                except FileNotFoundError as exc:
                    raise LinkNotFound(
                        f"sysctl {key}: no such key in {netns or 'the host netns'}",
                        exc.errno,
                    ) from exc
                except OSError as exc:
                    cls = _ERRNO_TO_EXC.get(exc.errno or 0, KernelError)
                    msg = f"sysctl {key}={value}: {exc.strerror}"
                    raise cls(msg, exc.errno) from exc
        finally:
            os.close(fd)
