# SPDX-License-Identifier: Apache-2.0
"""PF-side VF settings (IFLA_VF_*): apply on ADD, restore on rollback and DEL.

Written against ``cni.kernel.VfOps`` only; imports nothing third-party.

Order and messages follow sriov-cni ``pkg/sriov/sriov.go`` ApplyVFConfig
(vlan -> admin MAC -> rate -> spoofchk -> trust -> link_state). Unlike the
peer (issue #119: a shadowed ``err`` skips the rollback when ApplyVFConfig fails
half-way), each setting registers its undo *before* it is written: restoring
the original value is harmless when the write never happened, and a write that
failed half-way inside the driver is covered too.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from cni.errors import DEVICE_ERROR, CniError
from cni.kernel import KernelError, VfInfo, VfOps
from cni.rollback import Rollback

log = logging.getLogger(__name__)

_PROTO_NAMES = {0x8100: "802.1q", 0x88A8: "802.1ad"}
ZERO_MAC = "00:00:00:00:00:00"


@dataclass(frozen=True, slots=True)
class PfSettings:
    """The VF settings a netconf asks for; None = leave that setting alone."""

    mac: str | None = None
    vlan: int | None = None
    qos: int = 0
    vlan_proto: int = 0x8100
    spoofchk: bool | None = None
    trust: bool | None = None
    link_state: int | None = None
    min_tx_rate: int | None = None
    max_tx_rate: int | None = None

    @property
    def rate_set(self) -> bool:
        return self.min_tx_rate is not None or self.max_tx_rate is not None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PfSettings:
        return cls(**obj)


def vf_info_to_json(info: VfInfo) -> dict[str, Any]:
    return asdict(info)


def vf_info_from_json(obj: dict[str, Any]) -> VfInfo:
    return VfInfo(**obj)


def _on_off(flag: bool | None) -> str:
    return "on" if flag else "off"


def _fail(pf: str, vf: int, what: str, exc: Exception) -> CniError:
    return CniError(
        DEVICE_ERROR,
        f"failed to configure VF {vf} of {pf}",
        f"SRIOV-CNI failed to configure VF: {what}: {exc}",
    )


def _steps(
    ops: VfOps, pf: str, vf: int, want: PfSettings, orig: VfInfo
) -> list[tuple[str, str, Any, Any]]:
    """(name, error text, apply, restore) per configured setting, in apply order."""
    steps: list[tuple[str, str, Any, Any]] = []
    if want.vlan is not None:
        vlan, qos, proto = want.vlan, want.qos, want.vlan_proto
        steps.append(
            (
                "vlan",
                f"failed to set vf {vf} vlan configuration - id {vlan}, qos {qos} and "
                f"proto {_PROTO_NAMES.get(proto, hex(proto))}",
                lambda: ops.set_vlan(pf, vf, vlan, qos, proto),
                # A cached proto of 0 means the driver did not report one: 802.1q.
                lambda: ops.set_vlan(
                    pf, vf, orig.vlan, orig.qos, orig.vlan_proto or 0x8100
                ),
            )
        )
    if want.mac:
        mac = want.mac
        steps.append(
            (
                "admin MAC",
                f"failed to set MAC address to {mac}",
                lambda: ops.set_mac(pf, vf, mac),
                lambda: ops.set_mac(pf, vf, orig.mac or ZERO_MAC),
            )
        )
    if want.rate_set:
        lo, hi = want.min_tx_rate or 0, want.max_tx_rate or 0
        steps.append(
            (
                "tx rate",
                f"failed to set vf {vf} min_tx_rate to {lo} Mbps: "
                f"max_tx_rate to {hi} Mbps",
                lambda: ops.set_rate(pf, vf, lo, hi),
                lambda: ops.set_rate(pf, vf, orig.min_tx_rate, orig.max_tx_rate),
            )
        )
    if want.spoofchk is not None:
        on = want.spoofchk
        steps.append(
            (
                "spoofchk",
                f"failed to set vf {vf} spoofchk flag to {_on_off(on)}",
                lambda: ops.set_spoofchk(pf, vf, on),
                lambda: ops.set_spoofchk(pf, vf, bool(orig.spoofchk)),
            )
        )
    if want.trust is not None:
        trust = want.trust
        steps.append(
            (
                "trust",
                f"failed to set vf {vf} trust flag to {_on_off(trust)}",
                lambda: ops.set_trust(pf, vf, trust),
                lambda: ops.set_trust(pf, vf, bool(orig.trust)),
            )
        )
    if want.link_state is not None:
        state = want.link_state
        steps.append(
            (
                "link_state",
                f"failed to set vf {vf} link state to {state}",
                lambda: ops.set_link_state(pf, vf, state),
                lambda: ops.set_link_state(pf, vf, orig.link_state),
            )
        )
    return steps


def read_vf(ops: VfOps, pf: str, vf: int) -> VfInfo:
    """The VF's current entry on the PF (sriov-cni FillOriginalVfInfo)."""
    try:
        return ops.get_vf(pf, vf)
    except KernelError as exc:
        raise CniError(
            DEVICE_ERROR, f"failed to find vf {vf}", f"reading {pf}'s VF table: {exc}"
        ) from exc


def apply_pf_settings(
    ops: VfOps, pf: str, vf: int, want: PfSettings, orig: VfInfo, rb: Rollback
) -> None:
    """Write every configured setting; each one's undo is on ``rb`` first."""
    for name, what, apply, restore in _steps(ops, pf, vf, want, orig):
        rb.push(restore, f"restore {name} of VF {vf} on {pf}")
        try:
            apply()
        except KernelError as exc:
            raise _fail(pf, vf, what, exc) from exc


def restore_pf_settings(
    ops: VfOps, pf: str, vf: int, want: PfSettings, orig: VfInfo
) -> list[str]:
    """DEL: put back the original value of every setting ADD wrote.

    Newest first, like the rollback; every setting is tried even when one
    fails. Returns the failures (empty when all were restored).
    """
    failures: list[str] = []
    for name, _what, _apply, restore in reversed(_steps(ops, pf, vf, want, orig)):
        try:
            restore()
        except KernelError as exc:
            log.error("restoring %s of VF %d on %s failed: %s", name, vf, pf, exc)
            failures.append(f"restore {name} of VF {vf} on {pf}: {exc}")
    return failures
