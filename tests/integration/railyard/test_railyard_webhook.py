# SPDX-License-Identifier: Apache-2.0
"""The resource-inject webhook end to end over real TLS, reading a replayed API.

No API server exists on our machines, so both of its sides are played on
loopback with a certificate made by openssl for 127.0.0.1:

- the API server *calling* the webhook: AdmissionReview documents shaped as
  kube-apiserver sends them for a pod a ReplicaSet creates (generateName, no
  metadata.namespace in the object, ``resources: {}``, managedFields ...);
- the API server *answering* the webhook's reads: a replay server returning
  NetworkAttachmentDefinitionList pages (with ``continue``), a Namespace and
  a Status 403/404 in the API's exact JSON, checking the bearer token.

The webhook reaches the replay server through ``KubernetesApi.in_cluster``
(service-account token and CA files, KUBERNETES_SERVICE_HOST/PORT), its
answer's JSONPatch is applied with ``jsonpatch`` and the resulting pod checked.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from railyard.webhook.kube import KubeError, KubernetesApi
from railyard.webhook.server import MUTATE_PATH, make_server
from tests.doubles.http_probe import free_port
from tests.doubles.kube_api import (
    TOKEN,
    Replay,
    Tls,
    authorized,
    make_tls,
    not_found,
    serve_api,
    status,
)

pytestmark = pytest.mark.integration

RDMA = "cni.spidernet.io/rdma-resource-inject"
NETWORK = "cni.spidernet.io/network-resource-inject"
NAD_LIST = "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions"


# ------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"))


# ------------------------------------------------------- replayed API server


def nad(
    name: str, resource: str, group: str, key: str = RDMA, rv: int = 1
) -> dict[str, Any]:
    """A NetworkAttachmentDefinition as the API returns it (railyard apply's)."""
    config = {
        "cniVersion": "0.3.1",
        "name": name,
        "plugins": [
            {
                "vlan": 0,
                "min_tx_rate": 0,
                "max_tx_rate": 0,
                "type": "sriov",
                "ipam": {"type": "spiderpool", "default_ipv4_ippool": [f"{name}-v4"]},
            },
            {"type": "rdma"},
        ],
    }
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "annotations": {
                key: group,
                "k8s.v1.cni.cncf.io/resourceName": resource,
            },
            "creationTimestamp": "2026-12-02T09:14:07Z",
            "generation": 1,
            "labels": {"app.kubernetes.io/managed-by": "railyard", key: group},
            "name": name,
            "namespace": "spiderpool",
            "resourceVersion": str(4100 + rv),
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
        },
        "spec": {"config": json.dumps(config, separators=(",", ":"))},
    }


@dataclass
class Api:
    """What the replay server holds and what it was asked."""

    nads: list[dict[str, Any]] = field(default_factory=list)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    page_size: int = 3
    forbid_lists: bool = False
    port: int = 0
    requests: list[tuple[str, dict[str, list[str]], str]] = field(default_factory=list)

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if path == NAD_LIST:
            if self.forbid_lists:
                return 403, status(
                    403,
                    "Forbidden",
                    "network-attachment-definitions.k8s.cni.cncf.io is forbidden: "
                    'User "system:serviceaccount:railyard:railyard-webhook" cannot '
                    'list resource "network-attachment-definitions" in API group '
                    '"k8s.cni.cncf.io" at the cluster scope',
                    group="k8s.cni.cncf.io",
                    kind="network-attachment-definitions",
                )
            return 200, self.nad_page(query)
        if path.startswith("/api/v1/namespaces/"):
            name = path.rsplit("/", 1)[1]
            if name not in self.namespaces:
                return 404, status(
                    404, "NotFound", f'namespaces "{name}" not found',
                    name=name, kind="namespaces",
                )  # fmt: skip
            return 200, {
                "kind": "Namespace",
                "apiVersion": "v1",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
                    "resourceVersion": "391",
                    "creationTimestamp": "2026-12-01T08:00:00Z",
                    "labels": {"kubernetes.io/metadata.name": name},
                    "annotations": self.namespaces[name],
                    "managedFields": [],
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
        return not_found()

    def nad_page(self, query: dict[str, list[str]]) -> dict[str, Any]:
        key, _, value = query["labelSelector"][0].partition("=")
        matching = [n for n in self.nads if n["metadata"]["labels"].get(key) == value]
        start = int(query.get("continue", ["0"])[0])
        limit = min(int(query.get("limit", ["500"])[0]), self.page_size)
        page = matching[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": "4242"}
        if start + limit < len(matching):
            # the API's continue token is opaque; an offset stands in for it
            meta["continue"] = str(start + limit)
            meta["remainingItemCount"] = len(matching) - start - limit
        return {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "items": page,
            "kind": "NetworkAttachmentDefinitionList",
            "metadata": meta,
        }


@pytest.fixture
def api(tls: Tls, tmp_path: Path) -> Iterator[tuple[Api, KubernetesApi]]:
    state = Api()
    with serve_api(tls, state.answer) as replay:
        state.port = replay.port
        state.requests = replay.requests
        token = tmp_path / "token"
        token.write_text(TOKEN)
        client = KubernetesApi.in_cluster(
            token_file=token,
            ca_file=tls.cert,
            environ={
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(replay.port),
            },
        )
        try:
            yield state, client
        finally:
            client.close()


# ------------------------------------------------------------ the webhook


@pytest.fixture
def webhook(tls: Tls, api: tuple[Api, KubernetesApi]) -> Iterator[tuple[Api, int]]:
    state, client = api
    server = make_server(client, "127.0.0.1", 0, tls.cert, tls.key)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def replicaset_pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The pod object of a CREATE from the ReplicaSet controller."""
    meta: dict[str, Any] = {
        "generateName": "trainer-7d9f8c6b5-",
        "creationTimestamp": None,
        "labels": {"app": "trainer", "pod-template-hash": "7d9f8c6b5"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "trainer-7d9f8c6b5",
                "uid": "5b1d1c3e-0d4b-4a8e-9c55-1f0f7e0b9a11",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-12-02T10:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:generateName": {}}},
            }
        ],
    }
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "ghcr.io/example/trainer:1.0",
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "sidecar",
                    "image": "ghcr.io/example/sidecar:1.0",
                    "resources": {"limits": {"cpu": "100m"}},
                },
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {},
    }


def admission_review(
    pod: dict[str, Any], operation: str = "CREATE", namespace: str = "ai"
) -> dict[str, Any]:
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "namespace": namespace,
            "operation": operation,
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "8d1c6d0e-3c87-4d5f-9a77-3d8a1f6c2b10",
                "groups": [
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                    "system:authenticated",
                ],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def post(tls: Tls, port: int, review: dict[str, Any]) -> dict[str, Any]:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, context=tls.client_context(), timeout=30
    )
    try:
        body = json.dumps(review)
        # the API server's call: POST <path>?timeout=10s, JSON both ways
        conn.request(
            "POST",
            f"{MUTATE_PATH}?timeout=10s",
            body=body,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        response = conn.getresponse()
        assert response.status == 200
        answer: dict[str, Any] = json.loads(response.read())
    finally:
        conn.close()
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == review["request"]["uid"]
    return answer["response"]


def patched(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(pod, ops)
    return result


def eight_rails(key: str = RDMA, group: str = "rdma-network") -> list[dict[str, Any]]:
    return [
        nad(f"gpu{n}-sriov", f"spidernet.io/gpu{n}rdma", group, key, rv=n)
        for n in (5, 2, 8, 1, 7, 3, 6, 4)
    ]


# ------------------------------------------------------------------ tests


def test_pod_asking_for_rdma_gets_eight_rails_and_eight_vfs(
    tls: Tls, webhook: tuple[Api, int]
) -> None:
    state, port = webhook
    state.nads = eight_rails() + [nad("other", "spidernet.io/x", "another-group")]
    pod = replicaset_pod({RDMA: "rdma-network"})

    result = patched(pod, post(tls, port, admission_review(pod)))

    networks = ",".join(f"spiderpool/gpu{n}-sriov" for n in range(1, 9))
    limits = {f"spidernet.io/gpu{n}rdma": "1" for n in range(1, 9)}
    expected = copy.deepcopy(pod)
    expected["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] = networks
    expected["spec"]["containers"][0]["resources"] = {"limits": limits}
    # exactly that changed: not the sidecar's limits, nor anything else
    assert result == expected
    # one list per page (8 NADs, 3 per page), selected by label, with the token
    lists = [r for r in state.requests if r[0] == NAD_LIST]
    assert len(lists) == 3
    assert {q["labelSelector"][0] for _, q, _ in lists} == {f"{RDMA}=rdma-network"}
    assert all(authorized(auth) for _, _, auth in lists)
    assert not any(r[0].startswith("/api/v1/namespaces/") for r in state.requests)


def test_namespace_annotation_is_the_fallback(
    tls: Tls, webhook: tuple[Api, int]
) -> None:
    state, port = webhook
    state.nads = eight_rails(NETWORK, "team-a")[:2]
    state.namespaces["ai"] = {NETWORK: "team-a"}
    pod = replicaset_pod()  # no annotations at all

    result = patched(pod, post(tls, port, admission_review(pod)))

    assert result["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/networks": "spiderpool/gpu2-sriov,spiderpool/gpu5-sriov"
    }
    assert result["spec"]["containers"][0]["resources"]["limits"] == {
        "spidernet.io/gpu2rdma": "1",
        "spidernet.io/gpu5rdma": "1",
    }
    assert [r[0] for r in state.requests if authorized(r[2])] == [
        "/api/v1/namespaces/ai",
        NAD_LIST,
    ]


def test_custom_nad_name_and_two_networks_on_one_resource(
    tls: Tls, webhook: tuple[Api, int]
) -> None:
    state, port = webhook
    # rail-one came from SMC gpu1-sriov with multus.spidernet.io/cr-name;
    # both rails of the pair are VFs of one resource
    state.nads = [
        nad("rail-one", "spidernet.io/pair", "g"),
        nad("rail-two", "spidernet.io/pair", "g"),
    ]
    pod = replicaset_pod({RDMA: "g"})

    result = patched(pod, post(tls, port, admission_review(pod)))

    assert result["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == (
        "spiderpool/rail-one,spiderpool/rail-two"
    )
    assert result["spec"]["containers"][0]["resources"]["limits"] == {
        "spidernet.io/pair": "2"
    }


def test_no_network_in_the_group_denies_the_pod(
    tls: Tls, webhook: tuple[Api, int]
) -> None:
    state, port = webhook
    state.nads = eight_rails()
    pod = replicaset_pod({RDMA: "no-such-group"})

    response = post(tls, port, admission_review(pod))

    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == (
        f"no spidermultusconfigs with annotation: {RDMA}:no-such-group found"
    )


def test_api_refusal_denies_with_its_reason(tls: Tls, webhook: tuple[Api, int]) -> None:
    state, port = webhook
    state.forbid_lists = True
    pod = replicaset_pod({RDMA: "rdma-network"})

    response = post(tls, port, admission_review(pod))

    assert response["allowed"] is False
    assert response["status"]["message"].startswith(
        f"list network-attachment-definitions {RDMA}=rdma-network: 403 Forbidden"
    )


def test_pods_that_ask_nothing_and_updates_pass_untouched(
    tls: Tls, webhook: tuple[Api, int]
) -> None:
    state, port = webhook
    state.nads = eight_rails()
    state.namespaces["ai"] = {"owner": "team-a"}
    plain = post(tls, port, admission_review(replicaset_pod({"a": "b"})))
    update = post(
        tls, port, admission_review(replicaset_pod({RDMA: "rdma-network"}), "UPDATE")
    )
    for response in (plain, update):
        assert response["allowed"] is True
        assert "patch" not in response
    assert not any(r[0] == NAD_LIST for r in state.requests)


def test_adapter_reads_every_page_and_names_a_missing_namespace(
    api: tuple[Api, KubernetesApi],
) -> None:
    state, client = api
    state.nads = eight_rails()
    state.page_size = 5
    names = [
        n["metadata"]["name"] for n in client.labelled_networks(RDMA, "rdma-network")
    ]
    assert sorted(names) == [f"gpu{n}-sriov" for n in range(1, 9)]
    with pytest.raises(KubeError, match="get namespace gone: 404 Not Found"):
        client.namespace_annotations("gone")


def test_webhook_refuses_plain_http(tls: Tls, webhook: tuple[Api, int]) -> None:
    _, port = webhook
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            conn.request("POST", MUTATE_PATH, body="{}")
            conn.getresponse().read()
    finally:
        conn.close()


def test_railyard_webhook_serve_from_a_kubeconfig_until_sigterm(
    tls: Tls, api: tuple[Api, KubernetesApi], tmp_path: Path
) -> None:
    state, _ = api
    state.nads = eight_rails()[:1]
    kubeconfig = Replay(port=state.port).kubeconfig(tmp_path, tls, user="webhook")
    port = free_port()  # for the server to take
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "railyard", "webhook", "serve",
            "--cert", str(tls.cert), "--key", str(tls.key),
            "--listen", f"127.0.0.1:{port}", "--kubeconfig", str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                conn = http.client.HTTPSConnection(
                    "127.0.0.1", port, context=tls.client_context(), timeout=5
                )
                conn.request("GET", "/healthz")
                assert conn.getresponse().status == 200
                conn.close()
                break
            except OSError:
                assert time.monotonic() < deadline, "webhook did not come up"
                time.sleep(0.1)
        pod = replicaset_pod({RDMA: "rdma-network"})
        result = patched(pod, post(tls, port, admission_review(pod)))
        assert result["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == (
            "spiderpool/gpu5-sriov"
        )
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
        assert proc.returncode == 0, stderr
        # what an operator reads at 3 a.m.: which pod got what
        assert "pod ai/trainer-7d9f8c6b5-<generated>: /metadata/annotations" in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_the_api_server_keeps_its_connection_across_reviews(
    tls: Tls, webhook: tuple[Api, int]
) -> None:
    state, port = webhook
    state.nads = eight_rails()
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, context=tls.client_context(), timeout=30
    )
    try:
        for _ in range(3):
            pod = replicaset_pod({RDMA: "rdma-network"})
            review = admission_review(pod)
            conn.request(
                "POST",
                MUTATE_PATH,
                body=json.dumps(review),
                headers={"Content-Type": "application/json"},
            )
            response = conn.getresponse()
            answer = json.loads(response.read())
            assert answer["response"]["uid"] == review["request"]["uid"]
            assert answer["response"]["allowed"] is True
            assert not response.will_close
    finally:
        conn.close()
