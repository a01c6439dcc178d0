# SPDX-License-Identifier: Apache-2.0
"""The Kubernetes API, as narrow as the webhook needs it.

Two reads: the NetworkAttachmentDefinitions of all namespaces carrying an
inject label (one paginated list with a label selector), and a namespace's
annotations (the fallback when the pod has no inject annotation). Through the
official client (``kubernetes``, kubernetes-client/python; built by
``railyard.kube``): in a pod the service account's token and CA
(``in_cluster``), elsewhere a kubeconfig.
Its models stay in here; callers get plain mappings and ``KubeError``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from railyard.kube import (
    SERVICE_ACCOUNT,
    KubeError,
    in_cluster_client,
    kubeconfig_client,
    read,
)

__all__ = ["KubeError", "KubernetesApi", "NetworkSource"]

NAD_GROUP = "k8s.cni.cncf.io"
NAD_VERSION = "v1"
NAD_PLURAL = "network-attachment-definitions"
PAGE = 250


class NetworkSource(Protocol):
    """What the webhook reads; ``KubernetesApi`` in production, a dict in tests."""

    def labelled_networks(self, key: str, value: str) -> list[Mapping[str, Any]]: ...

    def namespace_annotations(self, name: str) -> Mapping[str, str]: ...


class KubernetesApi:
    # Below the MutatingWebhookConfiguration's timeoutSeconds (10), so a slow
    # API gives the pod a denial that says so, not the API server's timeout.
    def __init__(self, api_client: Any, timeout: float = 5.0) -> None:
        self._client = api_client
        self.timeout = timeout

    @classmethod
    def in_cluster(
        cls,
        token_file: Path = SERVICE_ACCOUNT / "token",
        ca_file: Path = SERVICE_ACCOUNT / "ca.crt",
        environ: Mapping[str, str] | None = None,
    ) -> KubernetesApi:
        """The pod's service account (KUBERNETES_SERVICE_HOST/PORT, token, CA)."""
        return cls(in_cluster_client(token_file, ca_file, environ))

    @classmethod
    def from_kubeconfig(cls, path: Path, context: str | None = None) -> KubernetesApi:
        return cls(kubeconfig_client(path, context))

    def labelled_networks(self, key: str, value: str) -> list[Mapping[str, Any]]:
        from kubernetes import client

        api = client.CustomObjectsApi(self._client)
        items: list[Mapping[str, Any]] = []
        token: str | None = None
        while True:
            page = read(
                f"list {NAD_PLURAL} {key}={value}",
                functools.partial(
                    api.list_cluster_custom_object,
                    NAD_GROUP,
                    NAD_VERSION,
                    NAD_PLURAL,
                    label_selector=f"{key}={value}",
                    limit=PAGE,
                    _continue=token,
                    _request_timeout=self.timeout,
                ),
            )
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    def namespace_annotations(self, name: str) -> Mapping[str, str]:
        from kubernetes import client

        api = client.CoreV1Api(self._client)
        namespace = read(
            f"get namespace {name}",
            lambda: api.read_namespace(name, _request_timeout=self.timeout),
        )
        return dict(namespace.metadata.annotations or {})

    def close(self) -> None:
        self._client.close()
