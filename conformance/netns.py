# SPDX-License-Identifier: Apache-2.0
"""Named network namespaces and links for the suite, driven through iproute2.

Standard library only. Every name starts with the suite's prefix ``rc`` so
concurrent test runs of other teams never collide with ours.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Sequence

PREFIX = "rc"
NETNS_DIR = "/var/run/netns"


def unique(tag: str = "") -> str:
    """``rc<tag><8 hex>``: short enough for an interface name when tag <= 5 chars."""
    return f"{PREFIX}{tag}{uuid.uuid4().hex[:8]}"


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


def add_netns(tag: str = "") -> str:
    name = unique(tag)
    ip("netns", "add", name)
    return name


def del_netns(name: str) -> None:
    ip("netns", "del", name, check=False)


def netns_path(name: str) -> str:
    return f"{NETNS_DIR}/{name}"


def netns_exists(name: str) -> bool:
    return name in {n.split()[0] for n in ip("netns", "list").splitlines() if n}


def links(netns: str | None = None) -> dict[str, dict]:
    """``ip -j link`` as name -> record (an independent view of the kernel)."""
    return {link["ifname"]: link for link in json.loads(ip("-j", "link", netns=netns))}


def addresses(ifname: str, netns: str | None = None) -> list[str]:
    out = json.loads(ip("-j", "addr", "show", "dev", ifname, netns=netns))
    return [
        f"{a['local']}/{a['prefixlen']}"
        for rec in out
        for a in rec.get("addr_info", [])
        if a.get("scope") == "global"
    ]


def exec_prefix(netns: str) -> Sequence[str]:
    """argv prefix running a command inside ``netns`` (a private "host")."""
    return ("ip", "netns", "exec", netns)
