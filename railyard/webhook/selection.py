# SPDX-License-Identifier: Apache-2.0
"""Which networks and resources a pod gets from its inject annotation: pure.

A pod (or, when the pod says nothing, its namespace) carries
``cni.spidernet.io/rdma-resource-inject: <group>`` or
``cni.spidernet.io/network-resource-inject: <group>``. The networks of that
group are the NetworkAttachmentDefinitions labelled ``<key>=<group>``
(``railyard apply`` copies the SpiderMultusConfig's annotation to that label,
as Spiderpool's SMC webhook does). The pod then gets, as a JSON patch:

- ``k8s.v1.cni.cncf.io/networks`` set to every selected network,
  ``namespace/name``, ordered by resource name then namespace/name (stable
  whatever order the API lists them in); an existing value is replaced, as
  Spiderpool does;
- on its first container, ``limits[<resource>] = <number of selected networks
  on that resource>`` for each resource no container already asks for.

Two of Spiderpool's bugs are not copied: the annotation names the NAD by its
own name (a custom ``multus.spidernet.io/cr-name`` is honoured, since the NAD
*is* what we select), and two networks on one resource ask for two VFs, not
one (each network's attachment consumes a device from the resource).

Errors carry Spiderpool's messages, with "spidermultusconfig" where it names
the object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from railyard.network import INJECT_KEYS, NETWORK_INJECT, RDMA_INJECT

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
RESOURCE_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"
# The cniTypes Spiderpool's pod webhook accepts; for the main plugin of a NAD.
SUPPORTED_TYPES = ("sriov", "ib-sriov", "macvlan", "ipvlan", "vlan", "ipoib")

__all__ = [
    "INJECT_KEYS",
    "NETWORK_INJECT",
    "RDMA_INJECT",
    "InjectError",
    "InjectRequest",
    "Network",
    "inject_request",
    "patch_for",
]


class InjectError(ValueError):
    """The pod cannot be given its networks; the message says why."""


@dataclass(frozen=True, slots=True)
class InjectRequest:
    key: str  # RDMA_INJECT or NETWORK_INJECT
    group: str
    from_namespace: bool = False


@dataclass(frozen=True, slots=True)
class Network:
    """What selection needs of one NetworkAttachmentDefinition."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    resource_name: str = ""
    cni_type: str = ""
    pools: tuple[str, ...] = ()
    config_error: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_nad(cls, obj: Mapping[str, Any]) -> Network:
        """A NetworkAttachmentDefinition as the API returns it."""
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        raw = (obj.get("spec") or {}).get("config") or ""
        cni_type, error = "", ""
        pools: tuple[str, ...] = ()
        try:
            conf = json.loads(raw) if raw else {}
            main = (conf.get("plugins") or [conf])[0] if isinstance(conf, dict) else {}
            cni_type = str(main.get("type", ""))
            ipam = main.get("ipam") or {}
            pools = tuple(
                str(p)
                for k in ("default_ipv4_ippool", "default_ipv6_ippool")
                for p in (ipam.get(k) or [])
            )
        except (ValueError, AttributeError, IndexError, TypeError):
            error = "spec.config is not a CNI config"
        return cls(
            namespace=str(meta.get("namespace", "default")),
            name=str(meta.get("name", "")),
            labels=dict(meta.get("labels") or {}),
            resource_name=str(annotations.get(RESOURCE_ANNOTATION, "")),
            cni_type=cni_type,
            pools=pools,
            config_error=error,
        )


def inject_request(
    pod_annotations: Mapping[str, str] | None,
    namespace_annotations: Mapping[str, str] | None,
) -> InjectRequest | None:
    """The pod's inject request; the namespace's only when the pod has none.

    The rdma key is looked at before the network key, at each level.
    """
    levels = ((False, pod_annotations), (True, namespace_annotations))
    for from_namespace, found in levels:
        for key in (RDMA_INJECT, NETWORK_INJECT):
            group = (found or {}).get(key)
            if group:
                return InjectRequest(key, group, from_namespace=from_namespace)
    return None


def select(request: InjectRequest, networks: Sequence[Network]) -> list[Network]:
    """The group's networks, checked and in their stable order."""
    chosen = [n for n in networks if n.labels.get(request.key) == request.group]
    if not chosen:
        raise InjectError(
            f"no spidermultusconfigs with annotation: {request.key}:{request.group} "
            "found"
        )
    for net in chosen:
        _check(net, request)
    return sorted(chosen, key=lambda n: (n.resource_name, n.key))


def _check(net: Network, request: InjectRequest) -> None:
    who = f"spidermultusconfig {net.key}"
    if net.config_error:
        raise InjectError(f"{who}: {net.config_error}")
    if not net.cni_type:
        raise InjectError(f"{who}: cniType is nil")
    if net.cni_type not in SUPPORTED_TYPES:
        raise InjectError(
            f"RDMA resource injection does not support cniType: {net.cni_type}"
        )
    if request.key == RDMA_INJECT:
        if not net.resource_name:
            raise InjectError(f"rdmaResourceName can not empty for {who}")
        if not net.pools:
            raise InjectError(f"no any ippools configured for {who}")
    elif net.resource_name and not net.pools:
        raise InjectError(f"no any ippools configured for {who}")


def patch_for(
    pod: Mapping[str, Any], networks: Sequence[Network]
) -> list[dict[str, Any]]:
    """RFC 6902 operations giving ``pod`` the (selected, ordered) networks."""
    ops: list[dict[str, Any]] = []
    value = ",".join(n.key for n in networks)
    meta = pod.get("metadata") or {}
    if meta.get("annotations") is None:
        ops.append(
            {
                "op": "add",
                "path": "/metadata/annotations",
                "value": {NETWORKS_ANNOTATION: value},
            }
        )
    else:
        ops.append(
            {
                "op": "add",
                "path": f"/metadata/annotations/{_escape(NETWORKS_ANNOTATION)}",
                "value": value,
            }
        )

    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        raise InjectError("the pod has no container to carry the resource limits")
    wanted: dict[str, int] = {}
    for net in networks:
        if net.resource_name:
            wanted[net.resource_name] = wanted.get(net.resource_name, 0) + 1
    asked = {
        res
        for c in containers
        for res in ((c.get("resources") or {}).get("limits") or {})
    }
    limits = {res: str(n) for res, n in wanted.items() if res not in asked}
    if not limits:
        return ops
    first = containers[0]
    resources = first.get("resources")
    if resources is None:
        ops.append(
            {
                "op": "add",
                "path": "/spec/containers/0/resources",
                "value": {"limits": limits},
            }
        )
    elif resources.get("limits") is None:
        ops.append(
            {
                "op": "add",
                "path": "/spec/containers/0/resources/limits",
                "value": limits,
            }
        )
    else:
        for res, count in limits.items():
            ops.append(
                {
                    "op": "add",
                    "path": f"/spec/containers/0/resources/limits/{_escape(res)}",
                    "value": count,
                }
            )
    return ops


def _escape(key: str) -> str:
    """A map key as a JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
