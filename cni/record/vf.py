# SPDX-License-Identifier: Apache-2.0
"""The VF part of an attachment record: everything DEL needs, cached before the
first change. ``PfSettings`` lives here because the record keeps them
(``cni.attach.pf`` applies and restores them).

Standard library and ``cni.kernel``'s value types only.

Compared with sriov-cni's cache (``OrigVfState`` + NetConf) the
record also keeps the DPDK mode (the peer drops it, PR #346), the host ifindex
and MAC so a VF that came back from a dead netns under the pod's name can be
recognised, the routes/rules installed in the pod, and the IPAM identity so DEL
can release without the original netconf. ``stage`` says what is true of the
VF while the record holds it (``Stage``); ADD re-saves the record as it goes,
DEL restores whatever was recorded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from cni.kernel import RouteSpec, RuleSpec, VfInfo

SCHEMA = 1


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


class Stage(StrEnum):
    """What the record on disk says is true of its VF, in the order ADD and DEL
    write them. The values are what records hold on disk since release 0.1.0
    (a record of any release reads back, and an older release reads ours);
    the names say what holds while the record carries that value.

    ADD writes ``ORIGINALS_RECORDED`` before its first change, then
    ``ADDRESSES_RECORDED`` (with an IPAM) or ``NETDEV_IN_POD`` (without) in its
    next save; a finished ADD's record keeps the last one it wrote. DEL (and a
    later ADD taking a VF back from a dead pod) write the rest.
    ``TRANSITIONS`` lists the moves allowed.
    """

    #: A record that names no stage (cut by hand, or a foreign writer): read
    #: as "anything may have been changed", like ``ORIGINALS_RECORDED``.
    NEW = "new"
    #: The VF's original state is on disk; the PF settings, plugin hooks and
    #: the RDMA move may have been applied since (not re-saved for each).
    ORIGINALS_RECORDED = "saved"
    #: The netdev is in the pod under the pod's name, with ``pod_mac``/``pod_mtu``.
    NETDEV_IN_POD = "moved"
    #: The addresses, rules and routes ADD installs are on disk (installed, or
    #: being installed): everything DEL must remove is named.
    ADDRESSES_RECORDED = "addressed"
    #: A DEL step failed; the VF may be anywhere between pod and host. DEL or
    #: GC retries the whole restore.
    RESTORE_FAILED = "del-failed"
    #: The VF is in a netns that lives, not where the record says: its address
    #: stays held until DEL or GC brings the VF home.
    VF_OUT_OF_REACH = "awaiting-vf"
    #: The VF is home and free to take; the address and the record remain.
    VF_HOME = "restored"
    #: The VF is home; the record is cut down to what releasing the address
    #: needs (ipamd was unreachable), for DEL's retry or GC.
    RELEASE_PENDING = "release-pending"

    @property
    def vf_home(self) -> bool:
        """The VF is back in the host: only the address (and record) remain."""
        return self in (Stage.VF_HOME, Stage.RELEASE_PENDING)


#: Legacy values read back as the stage now written in their place: release
#: 0.1.0 defined "attached" ("ADD done") but never saved it.
_LEGACY_STAGES = {"attached": Stage.ADDRESSES_RECORDED}

_ADD_STAGES = (Stage.ORIGINALS_RECORDED, Stage.NETDEV_IN_POD, Stage.ADDRESSES_RECORDED)
_DEL_STAGES = (
    Stage.RESTORE_FAILED,
    Stage.VF_OUT_OF_REACH,
    Stage.VF_HOME,
    Stage.RELEASE_PENDING,
)

#: Stage -> the stages a record may move to from it. ADD only moves forward
#: (a save may skip a stage it passed in memory); DEL may start from any
#: stage a VF can be out of the host in, and never sends a VF that is home
#: back to "out"; only the release is left once it is home.
TRANSITIONS: dict[Stage, frozenset[Stage]] = {
    Stage.NEW: frozenset({*_ADD_STAGES, *_DEL_STAGES}),
    Stage.ORIGINALS_RECORDED: frozenset({*_ADD_STAGES[1:], *_DEL_STAGES}),
    Stage.NETDEV_IN_POD: frozenset({Stage.ADDRESSES_RECORDED, *_DEL_STAGES}),
    Stage.ADDRESSES_RECORDED: frozenset(_DEL_STAGES),
    Stage.RESTORE_FAILED: frozenset(_DEL_STAGES),
    Stage.VF_OUT_OF_REACH: frozenset(_DEL_STAGES),
    Stage.VF_HOME: frozenset({Stage.RELEASE_PENDING}),
    Stage.RELEASE_PENDING: frozenset(),
}


def read_stage(value: str | None) -> Stage:
    """The stage a record's ``stage`` value names (any release's)."""
    if not value:
        return Stage.NEW
    return _LEGACY_STAGES.get(value) or Stage(value)


@dataclass(slots=True)
class VfState:
    """One VF attached to one pod interface (sriov and ib-sriov alike)."""

    container_id: str
    ifname: str
    network: str
    netns: str
    pci: str
    pf: str | None = None
    # CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME: the RDMA exporter labels by them.
    pod_namespace: str = ""
    pod_name: str = ""
    vf_index: int | None = None
    dpdk: bool = False
    host_ifname: str | None = None
    host_ifindex: int | None = None
    orig_mac: str | None = None  # netdev (effective) MAC before ADD
    orig_mtu: int | None = None
    orig_vf: VfInfo | None = None  # the PF's VF entry before ADD
    pf_settings: PfSettings = field(default_factory=PfSettings)
    pod_mac: str | None = None  # the MAC the netdev has in the pod
    pod_mtu: int | None = None
    addresses: list[str] = field(default_factory=list)  # CIDRs configured in the pod
    routes: list[RouteSpec] = field(default_factory=list)  # installed by us
    rules: list[RuleSpec] = field(default_factory=list)
    saved_main_defaults: list[RouteSpec] = field(default_factory=list)
    table: int | None = None
    ipam_type: str = ""  # "" when the netconf has no ipam
    ipam_conf: dict[str, Any] = field(default_factory=dict)  # for DEL without stdin
    rdma_device: str | None = None  # moved into the pod (rdmaIsolation)
    extra: dict[str, Any] = field(default_factory=dict)  # plugin-specific (GUIDs...)
    stage: Stage = Stage.NEW

    def advance(self, stage: Stage) -> None:
        """Move to ``stage``; a move ``TRANSITIONS`` does not allow is a bug."""
        if stage is not self.stage and stage not in TRANSITIONS[self.stage]:
            raise ValueError(
                f"record of VF {self.pci}: stage {self.stage.value} cannot become "
                f"{stage.value}"
            )
        self.stage = stage

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": SCHEMA}
        for f in fields(self):
            out[f.name] = getattr(self, f.name)
        out["orig_vf"] = vf_info_to_json(self.orig_vf) if self.orig_vf else None
        out["pf_settings"] = self.pf_settings.to_json()
        out["routes"] = [asdict(r) for r in self.routes]
        out["rules"] = [asdict(r) for r in self.rules]
        out["saved_main_defaults"] = [asdict(r) for r in self.saved_main_defaults]
        # Outside Kubernetes there is no pod to name: such a record keeps the
        # shape earlier releases wrote (and read back).
        for key in ("pod_namespace", "pod_name"):
            if not out[key]:
                del out[key]
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> VfState:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in obj.items() if k in known}
        # The cache adds camelCase bookkeeping keys; ours are snake_case.
        data.setdefault("container_id", obj.get("containerID", ""))
        # A record cut short by hand or by a foreign writer still names its
        # VF where it can (rdma looks the VF up by it); the rest is optional.
        for key in ("ifname", "network", "netns", "pci"):
            data.setdefault(key, "")
        if data.get("orig_vf") is not None:
            data["orig_vf"] = vf_info_from_json(data["orig_vf"])
        data["pf_settings"] = PfSettings.from_json(data.get("pf_settings") or {})
        data["routes"] = [RouteSpec(**r) for r in data.get("routes") or []]
        data["rules"] = [RuleSpec(**r) for r in data.get("rules") or []]
        data["saved_main_defaults"] = [
            RouteSpec(**r) for r in data.get("saved_main_defaults") or []
        ]
        data["stage"] = read_stage(data.get("stage"))
        return cls(**data)
