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
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

from cni.errors import CniError
from cni.kernel import KernelError, NotSupported, VfInfo, VfOps
from cni.kernel.cni_errors import cni_error
from cni.record.vf import PfSettings
from cni.rollback import Rollback

log = logging.getLogger(__name__)

_PROTO_NAMES = {0x8100: "802.1q", 0x88A8: "802.1ad"}
ZERO_MAC = "00:00:00:00:00:00"


def _on_off(flag: bool | None) -> str:
    return "on" if flag else "off"


def _fail(pf: str, vf: int, what: str, exc: KernelError) -> CniError:
    return cni_error(
        exc,
        f"failed to configure VF {vf} of {pf}",
        f"SRIOV-CNI failed to configure VF: {what}",
    )


class _Step(NamedTuple):
    name: str  # in logs and rollback descriptions
    error: str  # sriov-cni's text when the write fails
    apply: Callable[[], None]
    restore: Callable[[], None]


def _steps(ops: VfOps, pf: str, vf: int, want: PfSettings, orig: VfInfo) -> list[_Step]:
    """One step per configured setting, in apply order."""
    steps: list[_Step] = []
    if want.vlan is not None:
        vlan, qos, proto = want.vlan, want.qos, want.vlan_proto
        steps.append(
            _Step(
                "vlan",
                f"failed to set vf {vf} vlan configuration - id {vlan}, qos {qos} and "
                f"proto {_PROTO_NAMES.get(proto, hex(proto))}",
                partial(ops.set_vlan, pf, vf, vlan, qos, proto),
                # A cached proto of 0 means the driver did not report one: 802.1q.
                partial(
                    ops.set_vlan, pf, vf, orig.vlan, orig.qos, orig.vlan_proto or 0x8100
                ),
            )
        )
    if want.mac:
        steps.append(
            _Step(
                "admin MAC",
                f"failed to set MAC address to {want.mac}",
                partial(ops.set_mac, pf, vf, want.mac),
                partial(ops.set_mac, pf, vf, orig.mac or ZERO_MAC),
            )
        )
    if want.rate_set:
        lo, hi = want.min_tx_rate or 0, want.max_tx_rate or 0
        steps.append(
            _Step(
                "tx rate",
                f"failed to set vf {vf} min_tx_rate to {lo} Mbps: "
                f"max_tx_rate to {hi} Mbps",
                partial(ops.set_rate, pf, vf, lo, hi),
                partial(ops.set_rate, pf, vf, orig.min_tx_rate, orig.max_tx_rate),
            )
        )
    flags = (
        ("spoofchk", want.spoofchk, orig.spoofchk, ops.set_spoofchk),
        ("trust", want.trust, orig.trust, ops.set_trust),
    )
    for name, flag, was, set_flag in flags:
        if flag is not None:
            steps.append(
                _Step(
                    name,
                    f"failed to set vf {vf} {name} flag to {_on_off(flag)}",
                    partial(set_flag, pf, vf, flag),
                    partial(set_flag, pf, vf, bool(was)),
                )
            )
    if want.link_state is not None:
        state = want.link_state
        steps.append(
            _Step(
                "link_state",
                f"failed to set vf {vf} link state to {state}",
                partial(ops.set_link_state, pf, vf, state),
                partial(ops.set_link_state, pf, vf, orig.link_state),
            )
        )
    return steps


def read_vf(ops: VfOps, pf: str, vf: int) -> VfInfo:
    """The VF's current entry on the PF (sriov-cni FillOriginalVfInfo)."""
    try:
        return ops.get_vf(pf, vf)
    except KernelError as exc:
        raise cni_error(
            exc, f"failed to find vf {vf}", f"reading {pf}'s VF table"
        ) from exc


def _restore_unless_unsupported(step: _Step, pf: str, vf: int) -> None:
    """``step.restore()``; a device that refuses the setting altogether
    (EOPNOTSUPP) cannot have been changed by us, so that is not a failure.

    Otherwise an ADD whose step failed for that reason would keep a record
    whose restore fails the same way on every DEL, forever.
    """
    try:
        step.restore()
    except NotSupported as exc:
        log.warning(
            "VF %d on %s does not support %s (%s); nothing to restore",
            vf,
            pf,
            step.name,
            exc,
        )


def apply_pf_settings(
    ops: VfOps, pf: str, vf: int, want: PfSettings, orig: VfInfo, rb: Rollback
) -> None:
    """Write every configured setting; each one's undo is on ``rb`` first."""
    for step in _steps(ops, pf, vf, want, orig):
        rb.push(
            partial(_restore_unless_unsupported, step, pf, vf),
            f"restore {step.name} of VF {vf} on {pf}",
        )
        try:
            step.apply()
        except KernelError as exc:
            raise _fail(pf, vf, step.error, exc) from exc


def restore_pf_settings(
    ops: VfOps, pf: str, vf: int, want: PfSettings, orig: VfInfo
) -> list[str]:
    """DEL: put back the original value of every setting ADD wrote.

    Newest first, like the rollback; every setting is tried even when one
    fails. Returns the failures (empty when all were restored).
    """
    failures: list[str] = []
    for step in reversed(_steps(ops, pf, vf, want, orig)):
        try:
            _restore_unless_unsupported(step, pf, vf)
        except KernelError as exc:
            log.error("restoring %s of VF %d on %s failed: %s", step.name, vf, pf, exc)
            failures.append(f"restore {step.name} of VF {vf} on {pf}: {exc}")
    return failures
