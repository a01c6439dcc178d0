# SPDX-License-Identifier: Apache-2.0
"""Owner labels: a pod's RDMA series name its top-level workload.

The walk over controller references runs here against objects shaped as the
API returns them; the same walk over real HTTPS through the Kubernetes client
is in tests/integration/metrics/test_owner_labels_api.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cni.exporter.collector import RdmaCollector
from cni.exporter.owners import (
    NO_OWNER,
    Owner,
    OwnerLabels,
    controller_ref,
    plural,
    top_owner,
)
from railyard.kube import KubeError
from tests.doubles.rdma_node import RdmaNode


def ref(kind: str, name: str, api: str = "apps/v1", controller: bool = True) -> dict:
    return {
        "apiVersion": api,
        "kind": kind,
        "name": name,
        "uid": f"uid-{name}",
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def obj(kind: str, name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "uid": f"uid-{name}"}
    if owners:
        meta["ownerReferences"] = list(owners)
    return {"kind": kind, "metadata": meta}


class Cluster:
    """Objects by (kind, name), or the HTTP status the API answers for them."""

    def __init__(self, *objects: dict[str, Any], **statuses: int) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        self.statuses = statuses  # "Kind/name" -> status
        self.reads: list[tuple[str, str, str]] = []
        self.unreachable = False

    def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> Mapping[str, Any]:
        self.reads.append((api_version, kind, name))
        if self.unreachable:
            raise KubeError(f"get {kind} {namespace}/{name}: connection refused")
        code = self.statuses.get(f"{kind}/{name}")
        if code is not None:
            raise KubeError(f"get {kind} {namespace}/{name}: {code}", code)
        found = self.objects.get((kind, name))
        if found is None:
            raise KubeError(f"get {kind} {namespace}/{name}: 404 Not Found", 404)
        return found


DEPLOYMENT = Cluster(
    obj("Pod", "trainer-7d9f-x2", ref("ReplicaSet", "trainer-7d9f")),
    obj("ReplicaSet", "trainer-7d9f", ref("Deployment", "trainer")),
    obj("Deployment", "trainer"),
)


def test_a_deployments_pod_is_owned_by_the_deployment() -> None:
    assert top_owner(DEPLOYMENT, "team-a", "trainer-7d9f-x2") == Owner(
        "apps/v1", "Deployment", "team-a", "trainer"
    )


def test_a_cronjobs_pod_is_owned_by_the_cronjob() -> None:
    cluster = Cluster(
        obj("Pod", "nightly-29-abc", ref("Job", "nightly-29", api="batch/v1")),
        obj("Job", "nightly-29", ref("CronJob", "nightly", api="batch/v1")),
        obj("CronJob", "nightly"),
    )
    assert top_owner(cluster, "team-a", "nightly-29-abc") == Owner(
        "batch/v1", "CronJob", "team-a", "nightly"
    )


def test_a_bare_pod_and_an_unknown_pod_have_no_owner() -> None:
    cluster = Cluster(obj("Pod", "debug"))
    assert top_owner(cluster, "team-a", "debug") == NO_OWNER
    assert top_owner(cluster, "team-a", "deleted-already") == NO_OWNER


@pytest.mark.parametrize("code", [403, 404])
def test_an_owner_we_cannot_read_ends_the_walk_at_that_owner(code: int) -> None:
    # Spiderpool drops every owner label here; the reference already names it
    cluster = Cluster(
        obj("Pod", "worker-0", ref("PyTorchJob", "llm", api="kubeflow.org/v1")),
        **{"PyTorchJob/llm": code},
    )
    assert top_owner(cluster, "team-a", "worker-0") == Owner(
        "kubeflow.org/v1", "PyTorchJob", "team-a", "llm"
    )


def test_the_controller_reference_wins_over_the_first() -> None:
    pod = obj(
        "Pod", "p", ref("Thing", "other", controller=False), ref("StatefulSet", "db")
    )
    assert controller_ref(pod) == ref("StatefulSet", "db")
    no_controller = obj(
        "Pod", "q", ref("A", "a", controller=False), ref("B", "b", controller=False)
    )
    assert controller_ref(no_controller) == ref("A", "a", controller=False)


def test_a_loop_of_references_ends() -> None:
    cluster = Cluster(
        obj("Pod", "p", ref("Loop", "a")),
        obj("Loop", "a", ref("Loop", "b")),
        obj("Loop", "b", ref("Loop", "a")),
    )
    assert top_owner(cluster, "team-a", "p").kind == "Loop"
    assert len(cluster.reads) <= 4


def test_an_unreachable_api_is_an_error_not_a_bare_pod() -> None:
    cluster = Cluster(obj("Pod", "p"))
    cluster.unreachable = True
    with pytest.raises(KubeError):
        top_owner(cluster, "team-a", "p")


@pytest.mark.parametrize(
    ("kind", "resource"),
    [
        ("ReplicaSet", "replicasets"),
        ("CronJob", "cronjobs"),
        ("PyTorchJob", "pytorchjobs"),
        ("Inference", "inferences"),
        ("NetworkPolicy", "networkpolicies"),
        ("Ingress", "ingresses"),
        ("Gateway", "gateways"),
    ],
)
def test_resource_names_follow_the_api_machinerys_rule(
    kind: str, resource: str
) -> None:
    assert plural(kind) == resource


def wait_owner(labels: OwnerLabels, namespace: str, pod: str) -> Owner:
    deadline = time.monotonic() + 10
    while (owner := labels.lookup(namespace, pod)) == NO_OWNER:
        assert time.monotonic() < deadline, f"no owner for {namespace}/{pod}"
        time.sleep(0.01)
    return owner


def test_lookups_answer_at_once_and_resolve_in_the_background() -> None:
    gate = threading.Event()

    class Slow(Cluster):
        def get(self, *args: str) -> Mapping[str, Any]:
            gate.wait(10)
            return super().get(*args)

    cluster = Slow(*DEPLOYMENT.objects.values())
    labels = OwnerLabels(cluster)
    try:
        # the API has not answered: the scrape gets no owner, and does not wait
        assert labels.lookup("team-a", "trainer-7d9f-x2") == NO_OWNER
        gate.set()
        assert wait_owner(labels, "team-a", "trainer-7d9f-x2").name == "trainer"
        reads = len(cluster.reads)
        labels.lookup("team-a", "trainer-7d9f-x2")
        assert len(cluster.reads) == reads  # cached
    finally:
        labels.close()


def test_an_unreachable_api_is_asked_again_after_the_pause() -> None:
    now = [100.0]
    cluster = Cluster(*DEPLOYMENT.objects.values())
    cluster.unreachable = True
    labels = OwnerLabels(cluster, retry_after=30, clock=lambda: now[0])
    try:
        labels.lookup("team-a", "trainer-7d9f-x2")
        deadline = time.monotonic() + 10
        while not cluster.reads:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.05)
        cluster.unreachable = False
        assert labels.lookup("team-a", "trainer-7d9f-x2") == NO_OWNER
        assert len(cluster.reads) == 1  # within the pause: not asked again
        now[0] += 31
        assert wait_owner(labels, "team-a", "trainer-7d9f-x2").kind == "Deployment"
    finally:
        labels.close()


def test_pods_gone_from_the_node_are_forgotten() -> None:
    labels = OwnerLabels(Cluster(*DEPLOYMENT.objects.values()))
    try:
        wait_owner(labels, "team-a", "trainer-7d9f-x2")
        labels.retain([])
        assert labels.lookup("team-a", "trainer-7d9f-x2") == NO_OWNER  # asked again
    finally:
        labels.close()


def out_of_sequence(collector: RdmaCollector) -> dict[str, dict[str, str]]:
    """net_dev_name -> labels of rdma_out_of_sequence_total in one scrape."""
    return {
        s.labels["net_dev_name"]: s.labels
        for family in collector.collect()
        for s in family.samples
        if s.name == "rdma_out_of_sequence_total"
    }


def test_pod_series_get_the_owner_from_the_scrape_after_its_lookup(
    tmp_path: Path,
) -> None:
    node = RdmaNode(tmp_path)
    pf = node.pf(1)
    node.pod_nic(pf, 0, "trainer-7d9f-x2", namespace="team-a")
    gate = threading.Event()

    class Slow(Cluster):
        def get(self, *args: str) -> Mapping[str, Any]:
            gate.wait(10)
            return super().get(*args)

    labels = OwnerLabels(Slow(*DEPLOYMENT.objects.values()))
    collector = node.collector(owners=labels)
    try:
        first = out_of_sequence(collector)  # queues the lookup, does not wait
        gate.set()
        wait_owner(labels, "team-a", "trainer-7d9f-x2")
        second = out_of_sequence(collector)
    finally:
        labels.close()
    assert first["net1"]["pod_name"] == "trainer-7d9f-x2"
    assert first["net1"]["owner_kind"] == ""
    pod, host = second["net1"], second["ens1f0"]
    assert (
        pod["owner_api_version"], pod["owner_kind"],
        pod["owner_namespace"], pod["owner_name"],
    ) == ("apps/v1", "Deployment", "team-a", "trainer")  # fmt: skip
    assert host["owner_kind"] == host["owner_name"] == host["pod_name"] == ""
