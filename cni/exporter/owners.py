# SPDX-License-Identifier: Apache-2.0
"""Owner labels: the workload a pod's RDMA NICs belong to.

Spiderpool labels a pod's RDMA series with its top-level owner
(``owner_api_version``, ``owner_kind``, ``owner_namespace``, ``owner_name``:
Pod -> ReplicaSet -> Deployment, Pod -> Job -> CronJob, a PyTorchJob ...),
which its "AI workload" dashboard groups by. The chain is walked through each
object's controller reference (``ownerReferences`` entry with
``controller: true``, else the first, as Spiderpool takes it).

Where we differ on purpose:
- an owner we may not read (403) or that is gone (404) ends the walk at that
  owner: its reference already names it. Spiderpool drops every owner label
  then, so a narrow RBAC role hides the workload entirely;
- lookups run on a worker thread, never in a scrape: a slow or unreachable
  API costs a scrape nothing; a new pod's series get their owner labels at
  the first scrape after its lookup finished (empty until then);
- answers are cached per pod (owners do not change under a running pod);
  failures without an answer (API unreachable) are retried after a pause.

Imports neither prometheus_client nor the Kubernetes client:
``KubeObjects`` takes an ApiClient from ``railyard.kube``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from railyard.kube import KubeError, read

log = logging.getLogger(__name__)

#: Deeper chains than this are a loop in the references, not a workload.
MAX_DEPTH = 8


@dataclass(frozen=True, slots=True)
class Owner:
    """The top object of a pod's owner chain; empty fields: no owner known."""

    api_version: str = ""
    kind: str = ""
    namespace: str = ""
    name: str = ""

    def labels(self) -> tuple[str, str, str, str]:
        """The values of ``names.OWNER_LABELS``."""
        return (self.api_version, self.kind, self.namespace, self.name)


NO_OWNER = Owner()


class Objects(Protocol):
    """Reads one namespaced object as the API returns it (a JSON mapping).

    Raises ``KubeError`` (with ``status`` when the API answered). An object
    it cannot read at all returns ``{}``: the walk ends there.
    """

    def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> Mapping[str, Any]: ...


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The reference to ``obj``'s managing controller (else its first owner)."""
    metadata = obj.get("metadata")
    refs = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    if not isinstance(refs, list):
        return None
    owners: list[Mapping[str, Any]] = [
        r for r in refs if isinstance(r, Mapping) and r.get("kind")
    ]
    for ref in owners:
        if ref.get("controller") is True:
            return ref
    return owners[0] if owners else None


def top_owner(objects: Objects, namespace: str, pod: str) -> Owner:
    """Walk ``pod``'s controller references to the top; NO_OWNER for a bare pod.

    ``KubeError`` without an answer (unreachable API) propagates: the caller
    retries; a pod the API does not know (404) has no owner.
    """
    try:
        obj = objects.get("v1", "Pod", namespace, pod)
    except KubeError as exc:
        if exc.status == 404:
            return NO_OWNER
        raise
    owner = NO_OWNER
    seen: set[tuple[str, str]] = set()
    for _ in range(MAX_DEPTH):
        ref = controller_ref(obj)
        if ref is None:
            return owner
        owner = Owner(
            str(ref.get("apiVersion", "")),
            str(ref["kind"]),
            namespace,
            str(ref.get("name", "")),
        )
        if (owner.kind, owner.name) in seen:
            return owner
        seen.add((owner.kind, owner.name))
        try:
            obj = objects.get(owner.api_version, owner.kind, namespace, owner.name)
        except KubeError as exc:
            if exc.status in (403, 404):
                log.debug(
                    "owner %s/%s not readable (%s): the walk ends there",
                    owner.kind,
                    owner.name,
                    exc.status,
                )
                return owner
            raise
    return owner


def plural(kind: str) -> str:
    """The resource name of ``kind`` by the API machinery's default rule
    (every workload kind follows it: replicasets, cronjobs, pytorchjobs)."""
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + "s"


class KubeObjects:
    """``Objects`` over the Kubernetes API (an ApiClient of ``railyard.kube``).

    Core-group objects are read through their typed API (pods, replication
    controllers), every other group through the generic custom-objects path;
    other core kinds (a Node owning a static pod) are not workloads: ``{}``.
    """

    def __init__(self, api_client: Any, timeout: float = 5.0) -> None:
        self._client = api_client
        self.timeout = timeout

    def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> Mapping[str, Any]:
        from kubernetes import client

        group, _, version = api_version.rpartition("/")
        what = f"get {kind} {namespace}/{name}"
        if group:
            api = client.CustomObjectsApi(self._client)
            found: Any = read(what, lambda: api.get_namespaced_custom_object(
                group, version, namespace, plural(kind), name,
                _request_timeout=self.timeout,
            ))  # fmt: skip
            return found if isinstance(found, Mapping) else {}
        core = client.CoreV1Api(self._client)
        readers = {
            "Pod": core.read_namespaced_pod,
            "ReplicationController": core.read_namespaced_replication_controller,
        }
        reader = readers.get(kind)
        if reader is None:
            return {}
        model = read(
            what, lambda: reader(name, namespace, _request_timeout=self.timeout)
        )
        data = self._client.sanitize_for_serialization(model)
        return data if isinstance(data, Mapping) else {}

    def close(self) -> None:
        self._client.close()


class OwnerLabels:
    """The owners of the node's pods, looked up off the scrape path.

    ``lookup`` answers from the cache at once (``NO_OWNER`` while a lookup
    is pending) and queues pods it has not seen; one worker thread resolves
    them. ``retain`` forgets pods no longer on the node.
    """

    def __init__(
        self,
        objects: Objects,
        retry_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.objects = objects
        self.retry_after = retry_after
        self.clock = clock
        self._known: dict[tuple[str, str], Owner] = {}
        self._failed: dict[tuple[str, str], float] = {}  # pod -> retry time
        self._pending: set[tuple[str, str]] = set()
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._worker = threading.Thread(
            target=self._run, name="owner-labels", daemon=True
        )
        self._worker.start()

    def lookup(self, namespace: str, pod: str) -> Owner:
        key = (namespace, pod)
        with self._lock:
            owner = self._known.get(key)
            if owner is not None:
                return owner
            if key in self._pending or self._failed.get(key, 0.0) > self.clock():
                return NO_OWNER
            self._pending.add(key)
        self._queue.put(key)
        return NO_OWNER

    def retain(self, pods: Iterable[tuple[str, str]]) -> None:
        keep = set(pods)
        with self._lock:
            for cache in (self._known, self._failed):
                for key in [k for k in cache if k not in keep]:
                    del cache[key]

    def close(self) -> None:
        self._queue.put(None)
        self._worker.join(timeout=10)

    def _run(self) -> None:
        while (key := self._queue.get()) is not None:
            try:
                owner: Owner | None = top_owner(self.objects, *key)
            except KubeError as exc:
                log.warning(
                    "owner of pod %s/%s: %s; retrying in %.0f s",
                    *key,
                    exc,
                    self.retry_after,
                )
                owner = None
            except Exception:  # a bug here must not stop every later lookup
                log.exception("owner of pod %s/%s", *key)
                owner = None
            with self._lock:
                self._pending.discard(key)
                if owner is None:
                    self._failed[key] = self.clock() + self.retry_after
                else:
                    self._known[key] = owner
                    self._failed.pop(key, None)
