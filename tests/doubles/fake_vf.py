# SPDX-License-Identifier: Apache-2.0
"""``FakeVfOps``: an in-memory PF VF table implementing ``cni.kernel.VfOps``.

Failure injection by operation name (``fail["set_trust"] = NotSupported(...)``)
for unit tests of the PF-side apply/restore order; the lab's recording seam
plays this role in kernel tests.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from cni.kernel import VfInfo, VfOps


@dataclass
class FakeVfOps:
    table: dict[tuple[str, int], VfInfo] = field(default_factory=dict)
    fail: dict[str, Exception] = field(default_factory=dict)
    journal: list[str] = field(default_factory=list)

    def _set(self, op: str, pf: str, vf: int, **changes: Any) -> None:
        self.journal.append(op)
        if op in self.fail:
            raise self.fail.pop(op)
        self.table[(pf, vf)] = dataclasses.replace(self.table[(pf, vf)], **changes)

    def get_vf(self, pf: str, vf: int) -> VfInfo:
        return self.table[(pf, vf)]

    def set_vlan(self, pf: str, vf: int, vlan: int, qos: int, proto: int) -> None:
        self._set("set_vlan", pf, vf, vlan=vlan, qos=qos, vlan_proto=proto)

    def set_mac(self, pf: str, vf: int, mac: str) -> None:
        self._set("set_mac", pf, vf, mac=mac)

    def set_rate(self, pf: str, vf: int, min_tx: int, max_tx: int) -> None:
        self._set("set_rate", pf, vf, min_tx_rate=min_tx, max_tx_rate=max_tx)

    def set_spoofchk(self, pf: str, vf: int, on: bool) -> None:
        self._set("set_spoofchk", pf, vf, spoofchk=on)

    def set_trust(self, pf: str, vf: int, on: bool) -> None:
        self._set("set_trust", pf, vf, trust=on)

    def set_link_state(self, pf: str, vf: int, state: int) -> None:
        self._set("set_link_state", pf, vf, link_state=state)

    def set_node_guid(self, pf: str, vf: int, guid: str) -> None:
        self._set("set_node_guid", pf, vf, node_guid=guid)

    def set_port_guid(self, pf: str, vf: int, guid: str) -> None:
        self._set("set_port_guid", pf, vf, port_guid=guid)

    def rebind(self, pci: str) -> None:
        self.journal.append("rebind")


_check: VfOps = FakeVfOps()
