# SPDX-License-Identifier: Apache-2.0
"""Access to the Kubernetes API through the official client, for every reader.

The webhook (``railyard.webhook.kube``) and the RDMA exporter's owner labels
(``cni.exporter.owners``) build their client here: in a pod from the service
account's token and CA, elsewhere from a kubeconfig. A failed call becomes
``KubeError`` with the HTTP status, so callers tell "forbidden" or "not
found" (answers: cache them) from an unreachable API (retry later) without
touching the client's exception types.

The client (``kubernetes``, the ``webhook`` extra) is imported inside the
functions: importing this module costs nothing on a node without it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeError(RuntimeError):
    """The API could not be read; the message names the call and the status.

    ``status`` is the HTTP status of the API's answer, None when there was no
    answer (connection refused, timeout, TLS).
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def in_cluster_client(
    token_file: Path = SERVICE_ACCOUNT / "token",
    ca_file: Path = SERVICE_ACCOUNT / "ca.crt",
    environ: Mapping[str, str] | None = None,
) -> Any:
    """An ApiClient of the pod's service account (KUBERNETES_SERVICE_HOST/PORT,
    token, CA)."""
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
    return client.ApiClient(configuration)


def kubeconfig_client(path: Path, context: str | None = None) -> Any:
    """An ApiClient of a kubeconfig (out-of-cluster access)."""
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
    return client.ApiClient(configuration)


def read(what: str, call: Callable[[], Any]) -> Any:
    """``call()``, its failures as ``KubeError`` naming ``what``."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return call()
    except ApiException as exc:
        raise KubeError(f"{what}: {exc.status} {exc.reason}", exc.status) from None
    except (HTTPError, OSError) as exc:
        raise KubeError(f"{what}: {exc}") from None
