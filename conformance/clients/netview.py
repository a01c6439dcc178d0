# SPDX-License-Identifier: Apache-2.0
"""Reading network state back through iproute2, independently of the plugins.

Every assertion of the client tests about a namespace goes through ``ip -j``
(or busybox ``ip`` inside a container), never through our own kernel adapters,
so a bug shared by a plugin and its reader cannot hide itself.

Imports: standard library only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from typing import Any


def _ip(args: list[str], netns: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", "-j", *args]
    if netns and netns.startswith("/proc/"):
        # /proc/<pid>/ns/net (ctr, podman): enter it, `ip -n` wants a name
        cmd = ["nsenter", f"--net={netns}", *cmd]
    elif netns:
        cmd[1:1] = ["-n", os.path.basename(netns)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def ip_json(args: list[str], netns: str | None = None) -> list[dict[str, Any]]:
    """``ip -j ARGS`` in ``netns`` (a name, /var/run/netns path or /proc path)."""
    proc = _ip(args, netns)
    if proc.returncode != 0 or not proc.stdout.strip():
        return []
    data = json.loads(proc.stdout)
    return data if isinstance(data, list) else []


@dataclass(frozen=True)
class Nic:
    """A link as ``ip -j addr`` reports it."""

    name: str
    mac: str
    mtu: int
    up: bool
    ipv4: tuple[str, ...]  # CIDRs
    ipv6: tuple[str, ...]  # CIDRs, global scope only


def nic(ifname: str, netns: str | None = None) -> Nic | None:
    """The link ``ifname`` in ``netns`` (None: the test's own netns), or None."""
    data = ip_json(["addr", "show", "dev", ifname], netns)
    if not data:
        return None
    link = data[0]
    addrs = link.get("addr_info", [])
    return Nic(
        name=str(link["ifname"]),
        mac=str(link.get("address", "")),
        mtu=int(link.get("mtu", 0)),
        up="UP" in link.get("flags", []),
        ipv4=tuple(
            f"{a['local']}/{a['prefixlen']}" for a in addrs if a.get("family") == "inet"
        ),
        ipv6=tuple(
            f"{a['local']}/{a['prefixlen']}"
            for a in addrs
            if a.get("family") == "inet6" and a.get("scope") == "global"
        ),
    )


def link_names(netns: str | None = None) -> set[str]:
    return {str(e["ifname"]) for e in ip_json(["link", "show"], netns)}


def rules(netns: str | None = None, family: str = "-4") -> list[dict[str, Any]]:
    return ip_json([family, "rule", "show"], netns)


def routes(
    table: str, netns: str | None = None, family: str = "-4"
) -> list[dict[str, Any]]:
    return ip_json([family, "route", "show", "table", table], netns)


def source_rule_table(address: str, netns: str | None = None) -> str | None:
    """The table of the policy rule ``from <address> lookup T`` (None: no rule)."""
    ip = address.split("/", 1)[0]
    for rule in rules(netns, "-6" if ":" in ip else "-4"):
        if rule.get("src") == ip and "table" in rule:
            return str(rule["table"])
    return None


_BUSYBOX_INET = re.compile(r"^\s+inet (\S+)", re.M)
_BUSYBOX_LINK = re.compile(r"^\d+: ([^:@]+)[:@].* mtu (\d+)", re.M)
_BUSYBOX_ETHER = re.compile(r"^\s+link/(?:ether|infiniband) (\S+)", re.M)


def busybox_addrs(text: str) -> dict[str, Nic]:
    """Parse the text of busybox ``ip addr`` (run inside a container) per link."""
    out: dict[str, Nic] = {}
    blocks = re.split(r"(?m)^(?=\d+: )", text)
    for block in blocks:
        head = _BUSYBOX_LINK.search(block)
        if not head:
            continue
        name = head.group(1)
        ether = _BUSYBOX_ETHER.search(block)
        out[name] = Nic(
            name=name,
            mac=ether.group(1) if ether else "",
            mtu=int(head.group(2)),
            up=",UP" in block.split("\n", 1)[0] or "<UP" in block.split("\n", 1)[0],
            ipv4=tuple(_BUSYBOX_INET.findall(block)),
            ipv6=(),
        )
    return out


def return_to_host(netns: str, ifname: str) -> str:
    """Do to a VF stand-in what the kernel does to a real VF whose netns dies.

    A physical netdev is not destroyed with its namespace: it is moved back to
    the initial netns under the name it had in the pod, or ``dev<ifindex>`` when
    that name is taken there. A veth would die instead, so a test moves it out
    this way just before the runtime destroys the namespace. Returns the name
    the device now has in the host.
    """
    info = ip_json(["link", "show", "dev", ifname], netns)
    if not info:
        raise LookupError(f"{ifname} not in {netns}")
    enter = ["nsenter", f"--net={netns}", "ip", "link", "set", "dev"]
    subprocess.run([*enter, ifname, "down"], check=True)
    target = ifname
    if ifname in link_names():
        target = f"dev{info[0]['ifindex']}"
        subprocess.run([*enter, ifname, "name", target], check=True)
    subprocess.run([*enter, target, "netns", str(os.getpid())], check=True)
    return target
