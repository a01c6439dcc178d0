# SPDX-License-Identifier: Apache-2.0
"""``railyard gc``: release the addresses of pods that no longer exist.

A node that dies for good never runs DEL for its pods, and no node agent is
left there to reconcile: their addresses would stay allocated in ipamd
forever (rail pools are small). This is the cluster's side of the answer,
as Spiderpool's IP GC controller is: list ipamd's allocations, list the pods
from the Kubernetes API, and release, through ipamd's API (so every release
is fenced like any other write on replicated ipamd), each allocation whose
pod is gone.

"Gone" is judged by the pod's **UID**, never its name: a pod deleted and
created again under the same name (a StatefulSet's ``web-0``) is another pod,
and its addresses are not the old one's (whereabouts' #176 freed the new IP
of a re-created StatefulSet pod by name). Allocations without a UID (a runtime
outside Kubernetes) are never judged.

Sticky addresses (a StatefulSet pod's, kept for its name across restarts):
while the StatefulSet that owns the name (``<statefulset>-<ordinal>``) exists,
a gone pod's attachment is released the way a DEL releases it (the address
stays held for the name), and an address already held is kept. Once the owner
is gone too, the address itself is released.

Order matters: the allocations are listed **before** the pods. A pod runs
(and gets an address) only after the API server has it, so every allocation
listed first belongs to a pod that is in the later list unless it was
deleted; listing the other way round could miss a pod created in between
and free its fresh address.

Faults release nothing: any failed read of the API (403 missing RBAC, 5xx,
an error on page 3 of 7, a list that ends without its continuation, an
answer that does not decode) stops the round before the first release; an
unreachable ipamd is tried again at the next round (``--every``) or by the
next run of the CronJob.

The Kubernetes client (``kubernetes``, the ``webhook`` extra) is imported when
the cluster is read; nothing on a plugin's or the agent's path imports this.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from railyard.kube import KubeError

log = logging.getLogger(__name__)

PAGE = 500
_ORDINAL = re.compile(r"^(?P<owner>.+)-(?P<ordinal>0|[1-9][0-9]*)$")


@dataclass(frozen=True, slots=True)
class ClusterAllocation:
    """One address ipamd holds, as ``ListAllocations`` reports it."""

    pool: str
    ip: str
    network: str
    container_id: str  # "" : held for a sticky pod, no attachment
    ifname: str
    pod_namespace: str
    pod_name: str
    pod_uid: str
    sticky: bool
    node: str = ""

    def describe(self) -> str:
        pod = f"{self.pod_namespace}/{self.pod_name}" if self.pod_name else "no pod"
        held = (
            f"container {self.container_id} {self.ifname}"
            if self.container_id
            else "held for its name"
        )
        return (
            f"{self.ip} (pool {self.pool}) of {pod} (uid {self.pod_uid or '-'}, {held})"
        )


@dataclass(frozen=True, slots=True)
class ClusterState:
    """What the API says exists: pods by UID and by name, StatefulSets."""

    pod_uids: frozenset[str]
    pod_names: frozenset[tuple[str, str]]
    statefulsets: frozenset[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Release:
    """One release to make: an attachment (kept held if sticky) or an address."""

    allocation: ClusterAllocation
    why: str
    whole_address: bool  # True: ReleaseAllocation(pool, ip); else Release(cid, ifname)


@dataclass(slots=True)
class GcReport:
    released: list[Release] = field(default_factory=list)
    kept: int = 0
    unjudged: int = 0  # no pod UID recorded


class Cluster(Protocol):
    def state(self) -> ClusterState: ...


class Ipamd(Protocol):
    def allocations(self) -> list[ClusterAllocation]: ...

    def release_attachment(self, container_id: str, ifname: str) -> int: ...

    def release_address(self, pool: str, ip: str) -> int: ...


def owner_of(pod_name: str) -> str | None:
    """The StatefulSet a pod name belongs to (``web-3`` -> ``web``), if any."""
    m = _ORDINAL.match(pod_name)
    return m.group("owner") if m else None


def plan(
    allocations: Iterable[ClusterAllocation], cluster: ClusterState
) -> tuple[list[Release], int, int]:
    """(releases, kept, unjudged) for ``allocations`` against ``cluster``."""
    releases: list[Release] = []
    kept = unjudged = 0
    for a in allocations:
        owner = owner_of(a.pod_name) if a.sticky else None
        owner_alive = owner is not None and (a.pod_namespace, owner) in (
            cluster.statefulsets
        )
        if not a.container_id:
            if not a.sticky:
                unjudged += 1  # no attachment and no pod name to hold it for
                continue
            # Held for a sticky pod's name between its runs.
            if owner_alive or (a.pod_namespace, a.pod_name) in cluster.pod_names:
                kept += 1
            else:
                releases.append(
                    Release(a, "its StatefulSet is gone", whole_address=True)
                )
            continue
        if not a.pod_uid:
            unjudged += 1
            continue
        if a.pod_uid in cluster.pod_uids:
            kept += 1
            continue
        if a.sticky and not owner_alive:
            releases.append(
                Release(a, "pod and its StatefulSet are gone", whole_address=True)
            )
            continue
        why = (
            "pod gone; the address stays held for its StatefulSet"
            if a.sticky
            else "pod gone"
        )
        releases.append(Release(a, why, whole_address=False))
    return releases, kept, unjudged


def run_once(
    ipamd: Ipamd,
    cluster: Cluster,
    dry_run: bool,
    say: Callable[[str], None],
) -> GcReport:
    """One round: allocations, then pods, then the releases (see module doc).

    Raises ``KubeError`` (nothing released) or the ipamd client's error (the
    releases made so far stand; the next round finishes).
    """
    allocations = ipamd.allocations()
    state = cluster.state()
    releases, kept, unjudged = plan(allocations, state)
    report = GcReport(kept=kept, unjudged=unjudged)
    attachments_done: set[tuple[str, str]] = set()
    for r in releases:
        verb = "would release" if dry_run else "released"
        a = r.allocation
        if not dry_run:
            if r.whole_address:
                ipamd.release_address(a.pool, a.ip)
            elif (a.container_id, a.ifname) not in attachments_done:
                # One Release frees every family of the attachment.
                ipamd.release_attachment(a.container_id, a.ifname)
                attachments_done.add((a.container_id, a.ifname))
        report.released.append(r)
        say(f"{verb} {r.allocation.describe()}: {r.why}")
    return report


# ------------------------------------------------------------- the cluster


class KubeCluster:
    """Pods and StatefulSets from the API server, every page or nothing."""

    def __init__(
        self, api_client: Any, page: int = PAGE, timeout: float = 30.0
    ) -> None:
        self._client = api_client
        self.page = page
        self.timeout = timeout

    def state(self) -> ClusterState:
        from kubernetes import client

        pods = self._list(
            "pods",
            "PodList",
            client.CoreV1Api(self._client).list_pod_for_all_namespaces,
        )
        sets = self._list(
            "statefulsets",
            "StatefulSetList",
            client.AppsV1Api(self._client).list_stateful_set_for_all_namespaces,
        )
        return ClusterState(
            pod_uids=frozenset(uid for uid, _, _ in pods),
            pod_names=frozenset((ns, name) for _, ns, name in pods),
            statefulsets=frozenset((ns, name) for _, ns, name in sets),
        )

    def _list(
        self, what: str, kind: str, call: Callable[..., Any]
    ) -> list[tuple[str, str, str]]:
        """(uid, namespace, name) of every object, page by page."""
        from railyard.kube import read

        out: list[tuple[str, str, str]] = []
        token: str | None = None
        pages = 0
        while True:
            pages += 1
            where = f"list {what} (page {pages})"
            response = read(
                where,
                functools.partial(
                    call,
                    limit=self.page,
                    _continue=token,
                    _preload_content=False,
                    _request_timeout=self.timeout,
                ),
            )
            # The body read here, not by the client: a body cut short is a
            # read error, and a body that does not decode is caught below
            # instead of becoming a half-filled model object.
            raw = read(where, functools.partial(getattr, response, "data"))
            doc = _decoded(where, kind, raw)
            out += [_identity(where, item) for item in doc["items"]]
            meta = doc.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                if meta.get("remainingItemCount"):
                    raise KubeError(
                        f"{where}: the list ends with {meta['remainingItemCount']} "
                        "items remaining and no continuation"
                    )
                return out

    def close(self) -> None:
        self._client.close()


def _decoded(where: str, kind: str, raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise KubeError(f"{where}: the answer does not decode ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        got = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise KubeError(f"{where}: expected a {kind}, got {got!r}")
    if not isinstance(doc.get("items"), list):
        raise KubeError(f"{where}: the {kind} has no items list")
    return doc


def _identity(where: str, item: Any) -> tuple[str, str, str]:
    meta = item.get("metadata") if isinstance(item, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("uid"), str):
        raise KubeError(f"{where}: an item without metadata.uid")
    uid = meta["uid"]
    if not uid:
        raise KubeError(f"{where}: an item without metadata.uid")
    return uid, str(meta.get("namespace") or ""), str(meta.get("name") or "")


def summary(report: GcReport, dry_run: bool) -> str:
    verb = "would release" if dry_run else "released"
    return (
        f"gc: {verb} {len(report.released)}, kept {report.kept}, "
        f"{report.unjudged} without a pod UID left alone"
    )


__all__: Sequence[str] = (
    "ClusterAllocation",
    "ClusterState",
    "GcReport",
    "KubeCluster",
    "Release",
    "owner_of",
    "plan",
    "run_once",
    "summary",
)
