# SPDX-License-Identifier: Apache-2.0
"""The shipped Kubernetes manifests give each component what it needs, and no more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from railyard.webhook.kube import NAD_GROUP, NAD_PLURAL
from railyard.webhook.server import HEALTH_PATH, MUTATE_PATH

K8S = Path(__file__).resolve().parents[3] / "packaging" / "k8s"


def objects(name: str) -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((K8S / name).read_text())
    return {d["kind"]: d for d in docs if d}


def test_mutating_webhook_is_create_only_fail_closed_and_skips_kube_system() -> None:
    config = objects("webhook.yaml")["MutatingWebhookConfiguration"]
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    (rule,) = hook["rules"]
    assert rule["operations"] == ["CREATE"]
    assert rule["resources"] == ["pods"]
    assert hook["clientConfig"]["service"]["path"] == MUTATE_PATH
    (exclude,) = hook["namespaceSelector"]["matchExpressions"]
    assert exclude["key"] == "kubernetes.io/metadata.name"
    assert exclude["operator"] == "NotIn"
    assert "kube-system" in exclude["values"]


def test_deployment_serves_the_configured_path_with_the_shipped_account() -> None:
    deployment = objects("webhook.yaml")["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][-2:] == ["webhook", "serve"]
    assert container["readinessProbe"]["httpGet"]["path"] == HEALTH_PATH
    account = objects("webhook-rbac.yaml")["ServiceAccount"]["metadata"]["name"]
    assert pod["serviceAccountName"] == account


def test_rbac_reads_networks_and_namespaces_only() -> None:
    role = objects("webhook-rbac.yaml")["ClusterRole"]
    assert role["rules"] == [
        {"apiGroups": [NAD_GROUP], "resources": [NAD_PLURAL], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
    ]


def test_the_node_exporter_may_get_pods_and_workloads_and_nothing_else() -> None:
    (daemonset,) = [
        d
        for d in yaml.safe_load_all((K8S / "node-daemonset.yaml").read_text())
        if d["kind"] == "DaemonSet"
    ]
    pod = daemonset["spec"]["template"]["spec"]
    rbac = objects("exporter-rbac.yaml")
    assert pod["serviceAccountName"] == rbac["ServiceAccount"]["metadata"]["name"]
    binding = rbac["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == rbac["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "railyard-node", "namespace": "railyard"}
    ]
    rules = rbac["ClusterRole"]["rules"]
    assert all(rule["verbs"] == ["get"] for rule in rules)
    readable = {
        (g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert {("", "pods"), ("apps", "replicasets"), ("apps", "deployments"),
            ("batch", "jobs"), ("kubeflow.org", "pytorchjobs")} <= readable  # fmt: skip
    # the owner labels need the Kubernetes client: the exporter runs the
    # image built with it (the webhook's)
    (exporter,) = [c for c in pod["containers"] if c["name"] == "rdma-exporter"]
    webhook = objects("webhook.yaml")["Deployment"]["spec"]["template"]["spec"]
    assert exporter["image"] == webhook["containers"][0]["image"]


def test_gc_lists_pods_and_statefulsets_and_nothing_else() -> None:
    role = objects("gc.yaml")["ClusterRole"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["list"]},
    ]


def test_gc_runs_one_round_at_a_time_with_its_account() -> None:
    gc = objects("gc.yaml")
    cron = gc["CronJob"]["spec"]
    assert cron["concurrencyPolicy"] == "Forbid"
    pod = cron["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == gc["ServiceAccount"]["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["command"][-1] == "gc" and "--dry-run" not in container["args"]
    binding = gc["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == gc["ClusterRole"]["metadata"]["name"]


def test_every_pod_template_names_its_volumes_once() -> None:
    # The API server refuses a pod spec with two volumes of one name.
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec") or {}
            template = spec.get("template") or (
                (spec.get("jobTemplate") or {}).get("spec", {}).get("template")
            )
            if not template:
                continue
            names = [v["name"] for v in template["spec"].get("volumes", [])]
            assert len(names) == len(set(names)), f"{path.name}: {names}"
