# SPDX-License-Identifier: Apache-2.0
"""``railyard gc`` end to end: a real ipamd on a unix socket, the Kubernetes
API replayed over HTTPS in its exact JSON (PodList and StatefulSetList pages
with ``continue``, Status documents for 403 and 5xx), the official client
reading it through a kubeconfig."""

from __future__ import annotations

import base64
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION
from ipamd.client import IpamdClient
from ipamd.server import Daemon, build
from ipamd.settings import Settings
from railyard.cli import main
from tests.doubles.kube_api import Replay, Tls, make_tls, serve_api, status

pytestmark = pytest.mark.integration

POOL = """
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: gpu1-net11}
spec: {subnet: 172.16.11.0/24, ips: [172.16.11.1-172.16.11.50]}
"""
PODS = "/api/v1/pods"
SETS = "/apis/apps/v1/statefulsets"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def ipamd_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="i24-gc-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def start_ipamd(d: Path) -> Daemon:
    return build(
        Settings(db_url=f"sqlite:///{d / 'ipamd.db'}", listen=str(d / "ipamd.sock"))
    )


@pytest.fixture
def ipamd(ipamd_dir: Path) -> Iterator[Path]:
    daemon = start_ipamd(ipamd_dir)
    with IpamdClient(str(ipamd_dir / "ipamd.sock"), timeout=5) as c:
        c.stub.ApplyPools(
            pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=POOL)
        )
    try:
        yield ipamd_dir / "ipamd.sock"
    finally:
        daemon.stop(grace=None)


def allocate(
    sock: Path, cid: str, ns: str, name: str, uid: str, sticky: bool = False
) -> None:
    with IpamdClient(str(sock), timeout=5) as c:
        c.allocate(
            pb.AllocateRequest(
                network="gpu1-sriov",
                container_id=cid,
                ifname="net1",
                pod_namespace=ns,
                pod_name=name,
                pod_uid=uid,
                node="gpu-node-1",
                ipv4_pools=["gpu1-net11"],
                sticky=sticky,
            )
        )


def held(sock: Path) -> dict[str, str]:
    """container ID (or ``held:<pod>`` for a sticky address between runs) -> ip."""
    with IpamdClient(str(sock), timeout=5) as c:
        reply = c.stub.ListAllocations(
            pb.ListAllocationsRequest(client_version=API_VERSION)
        )
    return {(a.container_id or f"held:{a.pod_name}"): a.ip for a in reply.allocations}


def pod(ns: str, name: str, uid: str, owner: str = "") -> dict[str, Any]:
    """A Pod as the API lists it (trimmed of fields nothing here reads)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": uid,
        "resourceVersion": "4711",
        "creationTimestamp": "2026-12-04T08:00:00Z",
        "labels": {"app": name.rsplit("-", 1)[0]},
        "annotations": {"k8s.v1.cni.cncf.io/networks": "railyard/gpu1-sriov"},
    }
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": owner,
                "uid": f"uid-sts-{owner}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "metadata": meta,
        "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "main"}]},
        "status": {"phase": "Running", "podIP": "10.244.1.7"},
    }


def statefulset(ns: str, name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-sts-{name}"},
        "spec": {"replicas": 2, "serviceName": name},
        "status": {"replicas": 2},
    }


def paged(
    kind: str, items: list[dict[str, Any]], query: dict[str, list[str]]
) -> dict[str, Any]:
    """One page of a list, as the API pages with ``limit`` and ``continue``."""
    limit = int(query.get("limit", ["500"])[0])
    token = query.get("continue", [""])[0]
    start = int(base64.b64decode(token)) if token else 0
    page = items[start : start + limit]
    meta: dict[str, Any] = {"resourceVersion": "4711"}
    if start + limit < len(items):
        meta["continue"] = base64.b64encode(str(start + limit).encode()).decode()
        meta["remainingItemCount"] = len(items) - start - limit
    return {"kind": kind, "apiVersion": "v1", "metadata": meta, "items": page}


LIVE_PODS = [
    pod("default", "trainer-a", "uid-a"),
    pod("default", "trainer-b", "uid-b"),
    # Re-created under the old name: a new UID.
    pod("default", "trainer-c", "uid-c-new"),
    pod("db", "pg-1", "uid-pg-1", owner="pg"),
]


def cluster_answer(pods: list[dict[str, Any]], sets: list[dict[str, Any]]) -> Any:
    def answer(path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if path == PODS:
            return 200, paged("PodList", pods, query)
        if path == SETS:
            return 200, paged("StatefulSetList", sets, query)
        return 404, status(
            404, "NotFound", "the server could not find the requested resource"
        )

    return answer


@pytest.fixture
def allocations(ipamd: Path) -> Path:
    allocate(ipamd, "ca", "default", "trainer-a", "uid-a")
    allocate(ipamd, "cb", "default", "trainer-b", "uid-b")
    allocate(ipamd, "c-old", "default", "trainer-c", "uid-c-old")  # deleted
    allocate(ipamd, "c-new", "default", "trainer-c", "uid-c-new")
    allocate(ipamd, "cgone", "default", "finished", "uid-gone")  # deleted
    # pg-0 gone, its StatefulSet alive; pg-1 running.
    allocate(ipamd, "cpg0", "db", "pg-0", "uid-pg-0", sticky=True)
    allocate(ipamd, "cpg1", "db", "pg-1", "uid-pg-1", sticky=True)
    # redis-0's StatefulSet was deleted with its pods.
    allocate(ipamd, "credis", "cache", "redis-0", "uid-redis-0", sticky=True)
    return ipamd


def gc(replay: Replay, tls: Tls, folder: Path, sock: Path, *more: str) -> Any:
    return CliRunner().invoke(
        main,
        [
            "gc",
            "--kubeconfig",
            str(replay.kubeconfig(folder, tls)),
            "--socket",
            str(sock),
            "--page-size",
            "2",
            "--timeout",
            "5",
            *more,
        ],
    )


def test_gc_releases_exactly_the_addresses_of_deleted_pods(
    allocations: Path, tls: Tls, tmp_path: Path
) -> None:
    before = held(allocations)
    answer = cluster_answer(LIVE_PODS, [statefulset("db", "pg")])
    with serve_api(tls, answer) as replay:
        result = gc(replay, tls, tmp_path, allocations)
    assert result.exit_code == 0, result.stderr
    after = held(allocations)
    assert set(after) == {"ca", "cb", "c-new", "cpg1", "held:pg-0"}
    # pg-0 keeps its address for its next run; trainer-c's new pod its own.
    assert after["held:pg-0"] == before["cpg0"]
    assert after["c-new"] == before["c-new"]
    # The pods were read in pages of 2, every page asked for.
    pages = [q.get("continue", [""])[0] for p, q, _ in replay.requests if p == PODS]
    assert len(pages) == 2 and pages[0] == ""
    out = result.stdout
    assert (
        "released 172.16.11.3 (pool gpu1-net11) of default/trainer-c (uid uid-c-old"
        in out
    )
    assert "of cache/redis-0" in out and "pod and its StatefulSet are gone" in out
    assert "gc: released 4, kept 4" in result.stderr


def test_dry_run_lists_the_same_and_changes_nothing(
    allocations: Path, tls: Tls, tmp_path: Path
) -> None:
    before = held(allocations)
    answer = cluster_answer(LIVE_PODS, [statefulset("db", "pg")])
    with serve_api(tls, answer) as replay:
        result = gc(replay, tls, tmp_path, allocations, "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert held(allocations) == before
    lines = result.stdout.splitlines()
    assert len(lines) == 4 and all(line.startswith("would release ") for line in lines)


@pytest.mark.parametrize(
    "fault",
    ["forbidden", "server-error", "error-mid-list", "list-cut-short", "body-cut-short"],
)
def test_a_failed_read_of_the_api_releases_nothing(
    allocations: Path, tls: Tls, tmp_path: Path, fault: str
) -> None:
    before = held(allocations)
    good = cluster_answer(LIVE_PODS, [statefulset("db", "pg")])

    def answer(path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        second_page = path == PODS and "continue" in query
        if fault == "forbidden" and path == PODS:
            return 403, status(
                403,
                "Forbidden",
                'pods is forbidden: User "system:serviceaccount:railyard:railyard-gc" '
                'cannot list resource "pods" in API group "" at the cluster scope',
                kind="pods",
            )
        if fault == "server-error" and path == PODS:
            return 503, status(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            )
        if fault == "error-mid-list" and second_page:
            return 500, status(
                500,
                "InternalError",
                'an error on the server ("etcdserver: request timed out") has '
                "prevented the request from succeeding",
            )
        if fault == "list-cut-short" and path == PODS:
            code, body = good(path, query)
            body["metadata"].pop("continue", None)  # more items, no way on
            return code, body
        if fault == "body-cut-short" and second_page:
            code, body = good(path, query)
            return code, json.dumps(body).encode()[:-40]
        return good(path, query)

    with serve_api(tls, answer) as replay:
        result = gc(replay, tls, tmp_path, allocations)
    assert result.exit_code == 1
    assert "nothing released" in result.stderr
    assert held(allocations) == before


def test_an_unreachable_ipamd_is_tried_again_at_the_next_round(
    ipamd_dir: Path, tls: Tls, tmp_path: Path
) -> None:
    daemon = start_ipamd(ipamd_dir)
    sock = ipamd_dir / "ipamd.sock"
    try:
        with IpamdClient(str(sock), timeout=5) as c:
            c.stub.ApplyPools(
                pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=POOL)
            )
        allocate(sock, "cgone", "default", "finished", "uid-gone")
    finally:
        daemon.stop(grace=None)
    answer = cluster_answer(LIVE_PODS, [])
    with serve_api(tls, answer) as replay:
        kubeconfig = replay.kubeconfig(tmp_path, tls)
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "railyard", "gc", "--every", "1",
                "--kubeconfig", str(kubeconfig), "--socket", str(sock),
                "--timeout", "0.5",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            time.sleep(1.2)  # a round or two against no ipamd
            daemon = start_ipamd(ipamd_dir)
            try:
                deadline = time.monotonic() + 10
                while "cgone" in held(sock):
                    assert time.monotonic() < deadline, "never released"
                    time.sleep(0.1)
            finally:
                daemon.stop(grace=None)
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=10)
    assert "tried again at the next round" in err
    assert "released " in out and "default/finished" in out
    assert proc.returncode == 0
