# SPDX-License-Identifier: Apache-2.0
"""``Links`` adapter: rtnetlink on netdevs, addresses, routes and rules.

May import: the standard library, ``cni.kernel``, ``cni.kernel.rtnl`` (the wire
format) and ``cni.kernel.netns``. Imported lazily, inside ``real_deps()``.

Design:
- One message per method, packed by ``cni.kernel.rtnl``, errno translated to
  the contract's exceptions (with the kernel's extended-ack reason when it gives
  one). Methods that need an ifindex the kernel cannot look up by name
  (addresses, routes) do one RTM_GETLINK first.
- One rtnetlink socket per namespace, cached for the adapter's life, keyed by the
  namespace's nsfs inode (not by path: a path can be re-used by another netns).
  The socket is created after setns(2) into the target on this thread and the
  thread switched back (~0.1 ms), never by forking a helper into the netns.
  A socket keeps its namespace alive, so ``close()`` (and ``forget()``) matter.
- A missing namespace path is ``NetnsNotFound``; nothing is ever created.

Contract extensions (optional keywords / extra methods, all backward compatible):
``add_address(..., noprefixroute=False, nodad=False)``, ``forget(netns)``,
``move_renamed(index, to_netns, pattern, netns)``.
"""

from __future__ import annotations

import builtins
import errno
import ipaddress
import os
import socket
from collections import Counter
from typing import Protocol

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
    rtnl,
)
from cni.kernel.netns import (
    OWN_NETNS,
    in_netns_fd,
    netns_key,
    open_netns,
    register_cache,
)
from cni.kernel.rtnl import (
    FIB_RULE_HDR,
    IFADDRMSG,
    IFINFOMSG,
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_EXCL,
    NLM_F_REQUEST,
    RTMSG,
    DumpInterrupted,
    Message,
    NetlinkErrno,
)

IFF_UP = 0x1
IFA_F_NODAD = 0x02  # include/uapi/linux/if_addr.h
IFA_F_NOPREFIXROUTE = 0x200
RT_SCOPE_UNIVERSE = 0  # include/uapi/linux/rtnetlink.h
RT_SCOPE_LINK = 253
RT_SCOPE_NOWHERE = 255  # a wildcard in deletes
RT_TABLE_COMPAT = 252
RTN_UNICAST = 1
RTPROT_BOOT = 3
RTNH_F_ONLINK = 4  # rtm_flags of a single-nexthop route
FR_ACT_TO_TBL = 1  # include/uapi/linux/fib_rules.h
RTEXT_FILTER_SKIP_STATS = 1 << 3  # smaller RTM_NEWLINK replies; older kernels ignore it
DUMP_ATTEMPTS = 5
_IP_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_ACKED = NLM_F_REQUEST | NLM_F_ACK
_CREATE = _ACKED | NLM_F_CREATE | NLM_F_EXCL

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


def translate(exc: NetlinkErrno, what: str) -> KernelError:
    """The contract exception for a refused request, with the kernel's reason."""
    err = errno_error(exc.errno or 0, what)
    if exc.kernel_says:
        err.args = (f"{err.args[0]} ({exc.kernel_says})",)
    return err


class Channel(Protocol):
    """What the adapter needs of a socket (``rtnl.RtnlSocket``; a script in tests)."""

    def request(self, msg_type: int, flags: int, body: bytes) -> list[Message]: ...

    def close(self) -> None: ...


# ------------------------------------------------------------ message bodies


def _link_body(
    name: str | None = None, index: int = 0, flags: int = 0, change: int = 0
) -> bytes:
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, flags, change)
    return body + rtnl.attr_str(rtnl.IFLA_IFNAME, name) if name is not None else body


def _link_query(name: str | None = None) -> bytes:
    """An RTM_GETLINK body (one link by name, or a dump), without statistics."""
    return _link_body(name) + rtnl.attr_u32(rtnl.IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)


def link_info(body: bytes) -> LinkInfo:
    """A LinkInfo from an RTM_NEWLINK body (addresses of any length: IPoIB has 20)."""
    _family, link_type, index, flags, _change = IFINFOMSG.unpack_from(body)
    kind = None
    altnames: list[str] = []
    name = mac = ""
    mtu = 0
    perm = None
    for key, value in rtnl.iter_attrs(body, IFINFOMSG.size):
        if key == rtnl.IFLA_IFNAME:
            name = rtnl.text(value)
        elif key == rtnl.IFLA_ADDRESS:
            mac = rtnl.hex_address(value)
        elif key == rtnl.IFLA_MTU:
            mtu = rtnl.u32(value)
        elif key == rtnl.IFLA_PERM_ADDRESS:
            perm = rtnl.hex_address(value)
        elif key == rtnl.IFLA_LINKINFO:
            found = rtnl.attrs(value).get(rtnl.IFLA_INFO_KIND)
            kind = rtnl.text(found) if found is not None else None
        elif key == rtnl.IFLA_PROP_LIST:
            altnames += [
                rtnl.text(v)
                for k, v in rtnl.iter_attrs(value)
                if k == rtnl.IFLA_ALT_IFNAME
            ]
    return LinkInfo(
        index=index,
        name=name,
        mac=mac,
        mtu=mtu,
        up=bool(flags & IFF_UP),
        kind=kind,
        altnames=tuple(altnames),
        permanent_mac=perm if perm and perm.strip("0:") else None,
        link_type=link_type,
    )


def _addr_body(index: int, cidr: str, extra_flags: int = 0) -> bytes:
    iface = ipaddress.ip_interface(cidr)
    family = socket.AF_INET6 if iface.version == 6 else socket.AF_INET
    addr = str(iface.ip)
    body = IFADDRMSG.pack(family, iface.network.prefixlen, 0, RT_SCOPE_UNIVERSE, index)
    body += rtnl.attr_ip(rtnl.IFA_LOCAL, addr) + rtnl.attr_ip(rtnl.IFA_ADDRESS, addr)
    if iface.version == 4 and iface.network.prefixlen < 31:
        # As iproute2 "brd +" and Go's netlink.AddrAdd do.
        broadcast = str(iface.network.broadcast_address)
        body += rtnl.attr_ip(rtnl.IFA_BROADCAST, broadcast)
    if extra_flags:
        body += rtnl.attr_u32(rtnl.IFA_FLAGS, extra_flags)
    return body


def _addr_facts(body: bytes) -> tuple[int, int, str]:
    """(ifindex, scope, "address/prefix") of an RTM_NEWADDR body."""
    family, prefixlen, _flags, scope, index = IFADDRMSG.unpack_from(body)
    found = rtnl.attrs(body, IFADDRMSG.size)
    raw = found.get(rtnl.IFA_LOCAL) or found.get(rtnl.IFA_ADDRESS) or b""
    return index, scope, f"{rtnl.ip_text(family, raw)}/{prefixlen}"


def _rule_body(rule: RuleSpec) -> bytes:
    src = ipaddress.ip_network(rule.src, strict=False)
    family = socket.AF_INET6 if src.version == 6 else socket.AF_INET
    table = rule.table if rule.table < 256 else RT_TABLE_COMPAT
    body = FIB_RULE_HDR.pack(family, 0, src.prefixlen, 0, table, 0, 0, FR_ACT_TO_TBL, 0)
    body += rtnl.attr_u32(rtnl.FRA_TABLE, rule.table)
    body += rtnl.attr_u32(rtnl.FRA_PRIORITY, rule.priority)
    if src.prefixlen:
        body += rtnl.attr_ip(rtnl.FRA_SRC, str(src.network_address))
    return body


class NetlinkLinks:
    """``Links`` on real rtnetlink; see the module doc for the socket discipline."""

    def __init__(self) -> None:
        # The plugin's own netns, fixed now: after a setns, /proc/thread-self moves.
        self._own_fd = open_netns(OWN_NETNS)
        self._own_key = netns_key(OWN_NETNS)
        self._channels: dict[tuple[int, int], Channel] = {}
        # Requests sent, by message type (RTM_*): what a command costs in netlink.
        self.requests: Counter[int] = Counter()
        self._closed = False
        register_cache(self)

    # ------------------------------------------------------------ sockets

    def _channel(self, netns: NetnsPath) -> Channel:
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

    def _open_channel(self, netns_fd: int) -> Channel:
        """A socket created inside ``netns_fd`` (setns there and back, no fork)."""
        with in_netns_fd(netns_fd):
            return rtnl.RtnlSocket.open()

    def _request(
        self, netns: NetnsPath, msg_type: int, flags: int, body: bytes, what: str
    ) -> list[Message]:
        chan = self._channel(netns)
        self.requests[msg_type] += 1
        try:
            return chan.request(msg_type, flags, body)
        except NetlinkErrno as exc:
            raise translate(exc, what) from exc

    def _dump(
        self, netns: NetnsPath, msg_type: int, body: bytes, what: str
    ) -> list[bytes]:
        """The bodies of a dump's answers, read again while the kernel flags the
        dump inconsistent (NLM_F_DUMP_INTR: the table changed under it)."""
        chan = self._channel(netns)
        answer = msg_type - 2  # RTM_GETx answers with RTM_NEWx
        for _ in range(DUMP_ATTEMPTS):
            self.requests[msg_type] += 1
            try:
                msgs = chan.request(msg_type, NLM_F_REQUEST | NLM_F_DUMP, body)
            except DumpInterrupted:
                continue
            except NetlinkErrno as exc:
                raise translate(exc, what) from exc
            return list(rtnl.bodies(msgs, answer))
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
        os.close(self._own_fd)

    # -------------------------------------------------------------- links

    def _getlink(self, name: str, netns: NetnsPath) -> bytes:
        where = f" in {netns}" if netns else ""
        msgs = self._request(
            netns,
            rtnl.RTM_GETLINK,
            NLM_F_REQUEST,
            _link_query(name),
            f"link {name}{where}",
        )
        return msgs[0].body

    def _index(self, name: str, netns: NetnsPath) -> int:
        return int(IFINFOMSG.unpack_from(self._getlink(name, netns))[2])

    def get(self, name: str, netns: NetnsPath = None) -> LinkInfo:
        return link_info(self._getlink(name, netns))

    def find(self, name: str, netns: NetnsPath = None) -> LinkInfo | None:
        try:
            return self.get(name, netns)
        except LinkNotFound:
            return None

    def list(self, netns: NetnsPath = None) -> builtins.list[LinkInfo]:
        answers = self._dump(netns, rtnl.RTM_GETLINK, _link_query(), "links")
        return [link_info(answer) for answer in answers]

    def _setlink(self, body: bytes, netns: NetnsPath, what: str) -> None:
        self._request(netns, rtnl.RTM_SETLINK, _ACKED, body, what)

    def set_up(self, name: str, netns: NetnsPath = None) -> None:
        body = _link_body(name, flags=IFF_UP, change=IFF_UP)
        self._setlink(body, netns, f"set {name} up")

    def set_down(self, name: str, netns: NetnsPath = None) -> None:
        self._setlink(_link_body(name, change=IFF_UP), netns, f"set {name} down")

    def rename(self, name: str, new_name: str, netns: NetnsPath = None) -> None:
        # IFLA_IFNAME is the new name here, so the device must be named by index.
        body = _link_body(new_name, index=self._index(name, netns))
        self._setlink(body, netns, f"rename {name} to {new_name}")

    def set_mtu(self, name: str, mtu: int, netns: NetnsPath = None) -> None:
        body = _link_body(name) + rtnl.attr_u32(rtnl.IFLA_MTU, mtu)
        self._setlink(body, netns, f"set {name} mtu {mtu}")

    def set_mac(self, name: str, mac: str, netns: NetnsPath = None) -> None:
        body = _link_body(name) + rtnl.attr_mac(rtnl.IFLA_ADDRESS, mac)
        self._setlink(body, netns, f"set {name} address {mac}")

    def del_altname(self, name: str, altname: str, netns: NetnsPath = None) -> None:
        props = rtnl.attr_str(rtnl.IFLA_ALT_IFNAME, altname)
        body = _link_body(name) + rtnl.nested(rtnl.IFLA_PROP_LIST, props)
        what = f"delete altname {altname} of {name}"
        self._request(netns, rtnl.RTM_DELLINKPROP, _ACKED, body, what)

    def _target_fd(self, to_netns: NetnsPath) -> int:
        return os.dup(self._own_fd) if to_netns is None else open_netns(to_netns)

    def move(self, name: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        fd = self._target_fd(to_netns)
        try:
            body = _link_body(name) + rtnl.attr_u32(rtnl.IFLA_NET_NS_FD, fd)
            self._setlink(body, netns, f"move {name} to {to_netns or 'the host netns'}")
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
            body = _link_body(pattern, index=index)
            body += rtnl.attr_u32(rtnl.IFLA_NET_NS_FD, fd)
            self._setlink(body, netns, f"move link {index} as {pattern}")
        finally:
            os.close(fd)
        if "%" not in pattern:
            # A fixed name: the kernel moved the link as that name (the current
            # one taken in the target) or renamed it there after the move.
            return pattern
        # The kernel keeps the ifindex unless the target netns already uses it.
        prefix = pattern.split("%", 1)[0]
        candidates = [ln for ln in self.list(to_netns) if ln.name.startswith(prefix)]
        for link in candidates:
            if link.index == index:
                return link.name
        return candidates[-1].name if candidates else pattern

    # ---------------------------------------------------------- addresses

    def _addr_dump(
        self, netns: NetnsPath, index: int
    ) -> builtins.list[tuple[int, str]]:
        """(scope, cidr) of each address on link ``index``."""
        body = IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        out = []
        for answer in self._dump(netns, rtnl.RTM_GETADDR, body, "addresses"):
            link, scope, cidr = _addr_facts(answer)
            if link == index:
                out.append((scope, cidr))
        return out

    def addresses(self, name: str, netns: NetnsPath = None) -> builtins.list[str]:
        index = self._index(name, netns)
        return [
            cidr
            for scope, cidr in self._addr_dump(netns, index)
            if scope == RT_SCOPE_UNIVERSE
        ]

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
        flags = (IFA_F_NOPREFIXROUTE if noprefixroute else 0) | (
            IFA_F_NODAD if nodad else 0
        )
        body = _addr_body(self._index(name, netns), cidr, flags)
        what = f"add address {cidr} to {name}"
        self._request(netns, rtnl.RTM_NEWADDR, _CREATE, body, what)

    def del_address(self, name: str, cidr: str, netns: NetnsPath = None) -> None:
        body = _addr_body(self._index(name, netns), cidr)
        what = f"delete address {cidr} from {name}"
        self._request(netns, rtnl.RTM_DELADDR, _ACKED, body, what)

    def flush_addresses(self, name: str, netns: NetnsPath = None) -> None:
        """Delete every global-scope address (what ``addresses()`` lists)."""
        index = self._index(name, netns)
        for scope, cidr in self._addr_dump(netns, index):
            if scope != RT_SCOPE_UNIVERSE:
                continue
            what = f"delete address {cidr} from {name}"
            try:
                body = _addr_body(index, cidr)
                self._request(netns, rtnl.RTM_DELADDR, _ACKED, body, what)
            except KernelError as exc:
                # Deleting a primary IPv4 address also removes its secondaries.
                if exc.errno != errno.EADDRNOTAVAIL:
                    raise

    # ------------------------------------------------------------- routes

    def _route_body(
        self, route: RouteSpec, netns: NetnsPath, *, deleting: bool = False
    ) -> bytes:
        dst = ipaddress.ip_network(route.dst, strict=False)
        family = socket.AF_INET6 if dst.version == 6 else socket.AF_INET
        table = route.table if route.table < 256 else RT_TABLE_COMPAT
        if route.scope is not None:
            scope = route.scope
        elif deleting:
            scope = RT_SCOPE_NOWHERE  # any scope, as "ip route del" matches
        else:
            scope = RT_SCOPE_UNIVERSE if route.gw else RT_SCOPE_LINK
        if deleting:
            proto = 0  # deletes match any protocol
        else:
            proto = RTPROT_BOOT if route.protocol is None else route.protocol
        flags = RTNH_F_ONLINK if route.onlink and not deleting else 0
        body = RTMSG.pack(
            family, dst.prefixlen, 0, 0, table, proto, scope, RTN_UNICAST, flags
        )
        body += rtnl.attr_u32(rtnl.RTA_TABLE, route.table)
        if dst.prefixlen:
            body += rtnl.attr_ip(rtnl.RTA_DST, str(dst.network_address))
        if route.gw:
            body += rtnl.attr_ip(rtnl.RTA_GATEWAY, route.gw)
        if route.dev:
            body += rtnl.attr_u32(rtnl.RTA_OIF, self._index(route.dev, netns))
        if route.src:
            body += rtnl.attr_ip(rtnl.RTA_PREFSRC, route.src)
        if route.metric is not None:
            body += rtnl.attr_u32(rtnl.RTA_PRIORITY, route.metric)
        metrics = b""
        if route.mtu:
            metrics += rtnl.attr_u32(rtnl.RTAX_MTU, route.mtu)
        if route.advmss:
            metrics += rtnl.attr_u32(rtnl.RTAX_ADVMSS, route.advmss)
        if metrics:
            body += rtnl.nested(rtnl.RTA_METRICS, metrics)
        return body

    def add_route(self, route: RouteSpec, netns: NetnsPath = None) -> None:
        body = self._route_body(route, netns)
        what = f"add route {route.dst} table {route.table}"
        self._request(netns, rtnl.RTM_NEWROUTE, _CREATE, body, what)

    def del_route(self, route: RouteSpec, netns: NetnsPath = None) -> None:
        body = self._route_body(route, netns, deleting=True)
        what = f"delete route {route.dst} table {route.table}"
        self._request(netns, rtnl.RTM_DELROUTE, _ACKED, body, what)

    def routes(
        self, table: int = 254, family: int = 0, netns: NetnsPath = None
    ) -> builtins.list[RouteSpec]:
        request = RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
        dumped = self._dump(netns, rtnl.RTM_GETROUTE, request, "routes")
        names = {ln.index: ln.name for ln in self.list(netns)}
        out: list[RouteSpec] = []
        for body in dumped:
            fam, dst_len, _s, _t, hdr_table, proto, scope, rt_type, rt_flags = (
                RTMSG.unpack_from(body)
            )
            found = rtnl.attrs(body, RTMSG.size)
            rt_table = rtnl.u32(found[rtnl.RTA_TABLE]) if rtnl.RTA_TABLE in found else 0
            rt_table = rt_table or hdr_table
            if rt_table != table or rt_type != RTN_UNICAST:
                continue
            dst = "::" if fam == socket.AF_INET6 else "0.0.0.0"
            if rtnl.RTA_DST in found:
                dst = rtnl.ip_text(fam, found[rtnl.RTA_DST])
            metrics: dict[int, int] = {}
            if rtnl.RTA_METRICS in found:
                metrics = {
                    k: rtnl.u32(v) for k, v in rtnl.iter_attrs(found[rtnl.RTA_METRICS])
                }
            oif = rtnl.u32(found[rtnl.RTA_OIF]) if rtnl.RTA_OIF in found else 0
            gw = found.get(rtnl.RTA_GATEWAY)
            src = found.get(rtnl.RTA_PREFSRC)
            metric = found.get(rtnl.RTA_PRIORITY)
            out.append(
                RouteSpec(
                    dst=f"{dst}/{dst_len}",
                    gw=rtnl.ip_text(fam, gw) if gw is not None else None,
                    dev=names.get(oif) if oif else None,
                    table=rt_table,
                    scope=scope,
                    src=rtnl.ip_text(fam, src) if src is not None else None,
                    metric=rtnl.u32(metric) if metric is not None else None,
                    mtu=metrics.get(rtnl.RTAX_MTU),
                    advmss=metrics.get(rtnl.RTAX_ADVMSS),
                    onlink=bool(rt_flags & RTNH_F_ONLINK),
                    protocol=proto,
                )
            )
        return out

    # -------------------------------------------------------------- rules

    def add_rule(self, rule: RuleSpec, netns: NetnsPath = None) -> None:
        what = f"add rule from {rule.src} lookup {rule.table} pref {rule.priority}"
        self._request(netns, rtnl.RTM_NEWRULE, _CREATE, _rule_body(rule), what)

    def del_rule(self, rule: RuleSpec, netns: NetnsPath = None) -> None:
        what = f"delete rule from {rule.src} lookup {rule.table} pref {rule.priority}"
        self._request(netns, rtnl.RTM_DELRULE, _ACKED, _rule_body(rule), what)

    def rules(
        self, family: int = 0, netns: NetnsPath = None
    ) -> builtins.list[RuleSpec]:
        """Every IPv4/IPv6 "lookup" rule; no source reads as "0.0.0.0/0" ("::/0")."""
        request = FIB_RULE_HDR.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
        out: list[RuleSpec] = []
        for body in self._dump(netns, rtnl.RTM_GETRULE, request, "rules"):
            fam, _d, src_len, _t, hdr_table, _r1, _r2, action, _f = (
                FIB_RULE_HDR.unpack_from(body)
            )
            # Skip goto/blackhole rules and the multicast (IPMR) families.
            if action != FR_ACT_TO_TBL or fam not in _IP_FAMILIES:
                continue
            found = rtnl.attrs(body, FIB_RULE_HDR.size)
            src = "::" if fam == socket.AF_INET6 else "0.0.0.0"
            if rtnl.FRA_SRC in found:
                src = rtnl.ip_text(fam, found[rtnl.FRA_SRC])
            table_attr = found.get(rtnl.FRA_TABLE)
            priority = found.get(rtnl.FRA_PRIORITY)
            out.append(
                RuleSpec(
                    src=f"{src}/{src_len}",
                    table=(rtnl.u32(table_attr) if table_attr else 0) or hdr_table,
                    priority=rtnl.u32(priority) if priority is not None else 0,
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
