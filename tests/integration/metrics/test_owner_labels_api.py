# SPDX-License-Identifier: Apache-2.0
"""Owner labels read from a Kubernetes API over real TLS, through the client.

The API is the replay of tests/doubles/kube_api.py: Pod, ReplicaSet and
Deployment objects as kube-apiserver returns them, a kubeflow PyTorchJob the
exporter's role may not read (403 Status), and the bearer token checked. The
exporter reaches it as it does in a cluster (the service account) or from a
kubeconfig (``railyard-exporter --kubeconfig``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cni.exporter.owners import KubeObjects, Owner, top_owner
from railyard.kube import in_cluster_client
from tests.doubles.http_probe import free_port, get_text
from tests.doubles.kube_api import TOKEN, Replay, Tls, make_tls, serve_api, status
from tests.doubles.rdma_node import RdmaNode

pytestmark = pytest.mark.integration

NS = "team-a"


def meta(name: str, kind: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"6f1c2c1e-0000-4000-8000-{abs(hash((kind, name))) % 10**12:012d}",
        "resourceVersion": "81234",
        "generation": 1,
        "creationTimestamp": "2026-12-03T06:00:00Z",
        "labels": {"app": "trainer"},
        "managedFields": [],
    }
    if owner is not None:
        out["ownerReferences"] = [
            {**owner, "uid": "6f1c2c1e-0000-4000-8000-000000000001",
             "controller": True, "blockOwnerDeletion": True}
        ]  # fmt: skip
    return out


OBJECTS: dict[str, dict[str, Any]] = {
    f"/api/v1/namespaces/{NS}/pods/trainer-7d9f8c-x2k4p": {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            **meta(
                "trainer-7d9f8c-x2k4p",
                "Pod",
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "trainer-7d9f8c",
                },
            ),  # fmt: skip
            "generateName": "trainer-7d9f8c-",
        },
        "spec": {
            "nodeName": "gpu-node-1",
            "containers": [{"name": "main", "image": "trainer:1", "resources": {}}],
        },
        "status": {"phase": "Running", "podIPs": [{"ip": "10.244.1.7"}]},
    },
    f"/apis/apps/v1/namespaces/{NS}/replicasets/trainer-7d9f8c": {
        "kind": "ReplicaSet",
        "apiVersion": "apps/v1",
        "metadata": meta(
            "trainer-7d9f8c",
            "ReplicaSet",
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"},
        ),  # fmt: skip
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer"}}},
        "status": {"replicas": 1},
    },
    f"/apis/apps/v1/namespaces/{NS}/deployments/trainer": {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": meta("trainer", "Deployment"),
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer"}}},
        "status": {"replicas": 1},
    },
    f"/api/v1/namespaces/{NS}/pods/llm-worker-0": {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta(
            "llm-worker-0",
            "Pod",
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llm"},
        ),  # fmt: skip
        "spec": {"containers": [{"name": "pytorch", "image": "llm:1"}]},
        "status": {"phase": "Running"},
    },
}
FORBIDDEN = f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/llm"


def answer(path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
    if path == FORBIDDEN:
        return 403, status(
            403, "Forbidden",
            'pytorchjobs.kubeflow.org "llm" is forbidden: User '
            '"system:serviceaccount:railyard:railyard-node" cannot get resource '
            f'"pytorchjobs" in API group "kubeflow.org" in the namespace "{NS}"',
            name="llm", group="kubeflow.org", kind="pytorchjobs",
        )  # fmt: skip
    if path in OBJECTS:
        return 200, OBJECTS[path]
    name = path.rsplit("/", 1)[1]
    return 404, status(404, "NotFound", f'"{name}" not found', name=name)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"), cn="kubernetes.default.svc")


@pytest.fixture
def api(tls: Tls) -> Iterator[Replay]:
    with serve_api(tls, answer) as replay:
        yield replay


def test_the_walk_reads_each_owner_at_its_api_path(
    api: Replay, tls: Tls, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    client = in_cluster_client(
        token_file=token,
        ca_file=tls.cert,
        environ={
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(api.port),
        },
    )
    objects = KubeObjects(client)
    try:
        assert top_owner(objects, NS, "trainer-7d9f8c-x2k4p") == Owner(
            "apps/v1", "Deployment", NS, "trainer"
        )
        assert api.paths == [
            f"/api/v1/namespaces/{NS}/pods/trainer-7d9f8c-x2k4p",
            f"/apis/apps/v1/namespaces/{NS}/replicasets/trainer-7d9f8c",
            f"/apis/apps/v1/namespaces/{NS}/deployments/trainer",
        ]
        # the role may not read the job: its reference still names it
        assert top_owner(objects, NS, "llm-worker-0") == Owner(
            "kubeflow.org/v1", "PyTorchJob", NS, "llm"
        )
        assert api.paths[-1] == FORBIDDEN
        # a pod the API does not know has no owner
        assert top_owner(objects, NS, "gone-0").kind == ""
    finally:
        objects.close()


def test_railyard_exporter_labels_pod_series_through_a_kubeconfig(
    api: Replay, tls: Tls, tmp_path: Path
) -> None:
    node = RdmaNode(tmp_path / "node")
    pf = node.pf(1)
    node.pod_nic(
        pf, 0, "trainer-7d9f8c-x2k4p", namespace=NS, counters={"out_of_sequence": 3}
    )
    node.pod_nic(pf, 1, "llm-worker-0", namespace=NS)
    port = free_port()
    # stderr to a file: a pipe nobody reads while the test polls would stall
    # the exporter once its log fills the pipe.
    log = tmp_path / "exporter.log"
    with open(log, "w") as err_file:
        exporter = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "railyard-exporter"),
                "--listen", f"127.0.0.1:{port}",
                "--state-dir", str(node.state_dir),
                "--sysfs-root", str(node.root / "sys"),
                "--node-name", "gpu-node-1",
                "--kubeconfig", str(api.kubeconfig(tmp_path, tls)),
            ],
            stderr=err_file,
        )  # fmt: skip
    try:
        # Owners are looked up in the background, one pod after the other:
        # a pod's series carry empty owner labels until its lookup is done.
        wanted = [
            'pod_name="trainer-7d9f8c-x2k4p",owner_api_version="apps/v1",'
            f'owner_kind="Deployment",owner_namespace="{NS}",owner_name="trainer"',
            'pod_name="llm-worker-0",owner_api_version="kubeflow.org/v1",'
            f'owner_kind="PyTorchJob",owner_namespace="{NS}",owner_name="llm"',
        ]
        deadline = time.monotonic() + 30
        text = ""
        while not all(want in text for want in wanted):
            assert exporter.poll() is None, log.read_text()
            assert time.monotonic() < deadline, (text[-2000:], log.read_text())
            time.sleep(0.2)
            text = get_text(port)
        # the PF's series carry no pod and no owner
        assert 'net_dev_name="ens1f0",node_guid' in text
        assert (
            'is_root="true",rdma_parent_name="",pod_namespace="",pod_name="",'
            'owner_api_version="",owner_kind="",owner_namespace="",owner_name=""'
            in text
        )
    finally:
        exporter.terminate()
        exporter.wait(10)
    err = log.read_text()
    assert exporter.returncode == 0, err
    assert "Traceback" not in err
