# SPDX-License-Identifier: Apache-2.0
"""The Kubernetes API, as narrow as the webhook needs it.

Two reads: the NetworkAttachmentDefinitions of all namespaces carrying an
inject label (one paginated list with a label selector), and a namespace's
annotations (the fallback when the pod has no inject annotation). Through the
official client (``kubernetes``, kubernetes-client/python): in a pod it reads
the service account's token and CA (``in_cluster``), elsewhere a kubeconfig.
Its models stay in here; callers get plain mappings and ``KubeError``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

NAD_GROUP = "k8s.cni.cncf.io"
NAD_VERSION = "v1"
NAD_PLURAL = "network-attachment-definitions"
PAGE = 250
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeError(RuntimeError):
    """The API could not be read; the message names the call and the status."""


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
        from kubernetes import client
        from kubernetes.config.config_exception import ConfigException
        from kubernetes.config.incluster_config import InClusterConfigLoader

        configuration = client.Configuration()
        try:
            InClusterConfigLoader(
                token_filename=str(token_file),
                cert_filename=str(ca_file),
                environ=dict(os.environ if environ is None else environ),
            ).load_and_set(client_configuration=configuration)
        except ConfigException as exc:
            raise KubeError(f"not in a pod with a service account: {exc}") from None
        return cls(client.ApiClient(configuration))

    @classmethod
    def from_kubeconfig(cls, path: Path, context: str | None = None) -> KubernetesApi:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        configuration = client.Configuration()
        try:
            config.load_kube_config(
                config_file=str(path),
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except ConfigException as exc:
            raise KubeError(f"kubeconfig {path}: {exc}") from None
        return cls(client.ApiClient(configuration))

    def labelled_networks(self, key: str, value: str) -> list[Mapping[str, Any]]:
        from kubernetes import client

        api = client.CustomObjectsApi(self._client)
        items: list[Mapping[str, Any]] = []
        token: str | None = None
        while True:
            page = self._read(
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
        namespace = self._read(
            f"get namespace {name}",
            lambda: api.read_namespace(name, _request_timeout=self.timeout),
        )
        return dict(namespace.metadata.annotations or {})

    def _read(self, what: str, call: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return call()
        except ApiException as exc:
            raise KubeError(f"{what}: {exc.status} {exc.reason}") from None
        except (HTTPError, OSError) as exc:
            raise KubeError(f"{what}: {exc}") from None

    def close(self) -> None:
        self._client.close()
