# SPDX-License-Identifier: Apache-2.0
"""CHECK of the VF lifecycle shared by sriov and ib-sriov: ``check``.

Compares the pod side with the record (and the runtime's prevResult), code
106 naming what differs. Standard library, the contract modules and
``cni.attach.*`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cni.attach.device import host_netdevs
from cni.attach.teardown import is_the_vf
from cni.errors import CHECK_FAILED, CniError
from cni.kernel import NetnsNotFound

if TYPE_CHECKING:
    from cni.deps import Deps


def check(
    deps: Deps,
    plugin: str,
    container_id: str,
    ifname: str,
    netns: str,
    prev_ips: Sequence[str],
    prev_mac: str,
) -> None:
    """CHECK: the interface, its addresses, routes and rules are as ADD left them."""
    st = deps.records.vf(plugin).load(container_id, ifname)
    if st is None:
        raise CniError(
            CHECK_FAILED,
            f"no attachment recorded for {ifname}",
            f"container {container_id}",
        )
    if netns != st.netns:
        raise CniError(
            CHECK_FAILED,
            f"{ifname} was attached in another netns",
            f"CNI_NETNS {netns}, recorded at ADD {st.netns} (VF {st.pci})",
        )
    if st.dpdk:
        return
    try:
        link = deps.links.find(ifname, netns)
    except NetnsNotFound as exc:
        raise CniError(
            CHECK_FAILED, f"the pod netns {netns} of {ifname} is gone", str(exc)
        ) from exc
    if link is None or not is_the_vf(link, st, True):
        where = "is in the host" if host_netdevs(deps.sysfs, st.pci) else "is not"
        raise CniError(
            CHECK_FAILED,
            f"VF {st.pci} is not in its recorded netns as {ifname}",
            f"netns {netns}: {ifname} "
            + ("is another link" if link is not None else "not found")
            + f"; the VF {where}",
        )
    if prev_mac and link.mac != prev_mac.lower():
        raise CniError(
            CHECK_FAILED,
            f"interface {ifname} MAC differs",
            f"prevResult {prev_mac}, found {link.mac}",
        )
    have: set[str] = set(deps.links.addresses(ifname, netns))
    missing = [a for a in (*st.addresses, *prev_ips) if a not in have]
    if missing:
        raise CniError(
            CHECK_FAILED,
            f"addresses missing on {ifname}",
            ", ".join(dict.fromkeys(missing)),
        )
    rules = deps.links.rules(0, netns)
    for rule in st.rules:
        if not any(r.src == rule.src and r.table == rule.table for r in rules):
            raise CniError(
                CHECK_FAILED,
                f"rule from {rule.src} missing",
                f"expected lookup {rule.table} pref {rule.priority}",
            )
    for table in sorted({r.table for r in st.routes}):
        present = {r.dst for r in deps.links.routes(table, 0, netns)}
        for route in st.routes:
            if route.table == table and route.dst not in present:
                raise CniError(
                    CHECK_FAILED,
                    f"route {route.dst} missing",
                    f"table {table} on {ifname}",
                )
