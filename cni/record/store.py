# SPDX-License-Identifier: Apache-2.0
"""``AttachmentRecords``: every plugin's way to the record of (container ID, ifname).

On disk each part keeps the directory it has had since release 0.1.0
(``cni.state.cache`` layout ``<state_dir>/<dir>/<cid>-<ifname>.json``):

- the VF part (``VfState``) in ``sriov/`` or ``ib-sriov/``, by plugin;
- the IB section in ``ib-sriov-guid/``;
- the RDMA section in ``rdma/``.

Keeping them apart is what makes an upgrade safe without a migration step: a
node upgraded while pods are attached reads the files an older release wrote,
as they are, and an older release rolled back to reads ours. It also keeps
each part's lifetime its writer's: the shared DEL drops the VF part as soon
as the netdev is home, ib-sriov drops its section once the GUID is back, and
rdma, chained after sriov or ib-sriov, drops its own whichever DEL runs first.
Every write is the cache's atomic replace; the per-PCI and per-PF locks stay
with the commands (``cni.state.locks``).

Standard library, ``cni.record`` and ``cni.state.cache`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cni.errors import IO_FAILURE, CniError
from cni.record.sections import IbSection, RdmaSection
from cni.record.vf import VfState
from cni.state.cache import CacheRecord, StateCache, warn_skipped

#: The plugins that own a VF part, in the order a lookup tries them.
VF_PLUGINS = ("sriov", "ib-sriov")
IB_DIR = "ib-sriov-guid"
RDMA_DIR = "rdma"

T = TypeVar("T")


@dataclass(slots=True)
class Attachment:
    """The whole record of one pod interface: any part may be missing (an
    ADD under way, or a DEL that already dropped it)."""

    container_id: str
    ifname: str
    vf: VfState | None = None
    vf_plugin: str = ""  # "sriov" or "ib-sriov" when ``vf`` is set
    ib: IbSection | None = None
    rdma: RdmaSection | None = None


class VfRecords:
    """The VF parts one plugin (sriov or ib-sriov) wrote."""

    def __init__(self, cache: StateCache) -> None:
        self.cache = cache

    def save(self, st: VfState) -> None:
        self.cache.save(st.container_id, st.ifname, st.to_json(), network=st.network)

    def load(self, container_id: str, ifname: str) -> VfState | None:
        data = self.cache.load(container_id, ifname)
        return None if data is None else VfState.from_json(data)

    def delete(self, container_id: str, ifname: str) -> None:
        self.cache.delete(container_id, ifname)

    def all(self) -> list[VfState]:
        """Every VF part that decodes (a corrupt one is logged and left out)."""
        return [
            st
            for rec in self.cache.records()
            if (st := _decoded(VfState.from_json, rec)) is not None
        ]


def _corrupt(cache: StateCache, cid: str, ifname: str, exc: Exception) -> CniError:
    return CniError(
        IO_FAILURE,
        "corrupt state cache record",
        f"{cache.path(cid, ifname)}: {exc}",
    )


class AttachmentRecords:
    """The records under one state dir (``Deps.records``)."""

    def __init__(self, state_dir: Path | str) -> None:
        self.state_dir = Path(state_dir)
        self._ib = StateCache(self.state_dir, IB_DIR)
        self._rdma = StateCache(self.state_dir, RDMA_DIR)

    # ------------------------------------------------------------- VF part

    def vf(self, plugin: str) -> VfRecords:
        """The VF parts of ``plugin`` ("sriov" or "ib-sriov")."""
        return VfRecords(StateCache(self.state_dir, plugin))

    def any_vf(self, container_id: str, ifname: str) -> VfState | None:
        """The VF part of (container ID, ifname), whichever VF plugin wrote it."""
        for plugin in VF_PLUGINS:
            st = self.vf(plugin).load(container_id, ifname)
            if st is not None:
                return st
        return None

    # ---------------------------------------------------------- IB section

    def load_ib(self, container_id: str, ifname: str) -> IbSection | None:
        data = self._ib.load(container_id, ifname)
        if data is None:
            return None
        try:
            return IbSection.from_json(data)
        except ValueError as exc:
            raise _corrupt(self._ib, container_id, ifname, exc) from exc

    def save_ib(self, container_id: str, ifname: str, ib: IbSection) -> None:
        self._ib.save(container_id, ifname, ib.to_json(), network=ib.network)

    def delete_ib(self, container_id: str, ifname: str) -> None:
        self._ib.delete(container_id, ifname)

    def all_ib(self) -> list[tuple[str, str, IbSection]]:
        """(container ID, ifname, section) of every IB section that decodes:
        ib-sriov's GC needs only these, not every plugin's records."""
        return [
            (rec.container_id, rec.ifname, ib)
            for rec in self._ib.records()
            if (ib := _decoded(IbSection.from_json, rec)) is not None
        ]

    # -------------------------------------------------------- RDMA section

    def load_rdma(self, container_id: str, ifname: str) -> RdmaSection | None:
        data = self._rdma.load(container_id, ifname)
        return None if data is None else RdmaSection.from_json(data)

    def save_rdma(self, container_id: str, ifname: str, rdma: RdmaSection) -> None:
        self._rdma.save(container_id, ifname, rdma.to_json(), network=rdma.network)

    def delete_rdma(self, container_id: str, ifname: str) -> None:
        self._rdma.delete(container_id, ifname)

    # ----------------------------------------------------------- listing

    def all(self) -> list[Attachment]:
        """Every attachment with at least one readable part, for GC and the
        exporter; sorted by (container ID, ifname).

        A part that does not decode is left out (GC must go on past it) and
        logged with its path, while ``load_*`` reports it.
        """
        found: dict[tuple[str, str], Attachment] = {}

        def entry(cid: str, ifname: str) -> Attachment:
            return found.setdefault((cid, ifname), Attachment(cid, ifname))

        for plugin in VF_PLUGINS:
            for rec in StateCache(self.state_dir, plugin).records():
                st = _decoded(VfState.from_json, rec)
                if st is not None:
                    att = entry(rec.container_id, rec.ifname)
                    att.vf, att.vf_plugin = st, plugin
        for rec in self._ib.records():
            ib = _decoded(IbSection.from_json, rec)
            if ib is not None:
                entry(rec.container_id, rec.ifname).ib = ib
        for rec in self._rdma.records():
            rdma = _decoded(RdmaSection.from_json, rec)
            if rdma is not None:
                entry(rec.container_id, rec.ifname).rdma = rdma
        return [found[key] for key in sorted(found)]


def _decoded(decode: Callable[[dict[str, Any]], T], rec: CacheRecord) -> T | None:
    try:
        return decode(rec.data)
    except (TypeError, ValueError, KeyError) as exc:
        warn_skipped(rec.path, exc)
        return None
