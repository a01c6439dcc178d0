# SPDX-License-Identifier: Apache-2.0
"""A SpiderMultusConfig rendered as Spiderpool renders it, with our plugins.

Plugin order (Spiderpool's ``generateNetAttachDef``, the coordinator taken
out because our plugins do its work):

- sriov: ``[sriov, rdma (rdmaIsolation/enableRdma), chained..., tuning(mtu) when
  mtu > 0]``;
- ib-sriov: ``[ib-sriov, chained...]`` (ib-sriov isolates RDMA itself; the
  kernel recreates IPoIB's RDMA resources on a netns move, so rdma cannot be
  chained after it).

Each plugin's keys come in the order Spiderpool's Go structs marshal them,
and the conflist's top-level keys sorted (``cniVersion``, ``name``,
``plugins``), so a NAD's ``spec.config`` string reads like Spiderpool's.

Coordinator settings become the main plugin's own keys, written only when
they differ from our plugins' defaults (which are the coordinator's):
``podDefaultRouteNIC``; ``policyRouting: false`` for ``tunePodRoutes: false``
or ``enableCoordinator: false`` (no coordinator, no per-NIC tables);
``detectIPConflict`` / ``detectGateway`` when set; ``hijackCIDR`` (the
cluster's service and pod CIDRs, routed via eth0's gateway from every rail's
table, and from main when a rail takes the default route).
"""

from __future__ import annotations

import json
from typing import Any

from railyard.network import MultusConfig

NAD_API_VERSION = "k8s.cni.cncf.io/v1"
NAD_KIND = "NetworkAttachmentDefinition"
RESOURCE_NAME = "k8s.v1.cni.cncf.io/resourceName"
MANAGED_BY = "app.kubernetes.io/managed-by"
# kubectl's bookkeeping would leak the SMC onto the NAD (spiderpool #4345)
_NOT_COPIED = ("kubectl.kubernetes.io/last-applied-configuration",)
_DEVICE_PLUGINS = ("sriov", "ib-sriov", "rdma")


def conflist(net: MultusConfig, device_id: str = "") -> dict[str, Any]:
    """The CNI conflist; ``device_id`` pins a VF for runtimes without a device
    plugin (podman, ctr), written where Multus would inject it."""
    plugins = _plugins(net)
    if device_id:
        for plugin in plugins:
            if plugin["type"] in _DEVICE_PLUGINS:
                plugin["deviceID"] = device_id
    return {
        "cniVersion": net.cni_version,
        "name": net.conflist_name,
        "plugins": plugins,
    }


def config_string(conf: dict[str, Any]) -> str:
    """Compact JSON, as Go's json.Marshal writes a NAD's ``spec.config``."""
    return json.dumps(conf, separators=(",", ":"))


def nad(net: MultusConfig) -> dict[str, Any]:
    """The NetworkAttachmentDefinition, ready for ``kubectl apply``."""
    annotations = {k: v for k, v in net.annotations.items() if k not in _NOT_COPIED}
    if net.resource_name:
        annotations[RESOURCE_NAME] = net.resource_name
    labels = {**net.labels, **net.inject_labels, MANAGED_BY: "railyard"}
    return {
        "apiVersion": NAD_API_VERSION,
        "kind": NAD_KIND,
        "metadata": {
            "name": net.nad_name,
            "namespace": net.namespace,
            "annotations": annotations,
            "labels": labels,
        },
        "spec": {"config": config_string(conflist(net))},
    }


def _plugins(net: MultusConfig) -> list[dict[str, Any]]:
    chained = [json.loads(raw) for raw in net.chain_cni]
    if net.cni_type == "sriov":
        assert net.sriov is not None  # validated
        conf = net.sriov
        main: dict[str, Any] = {
            "vlan": conf.vlan_id,
            "min_tx_rate": conf.min_tx_rate,
            "max_tx_rate": conf.max_tx_rate,
            "type": "sriov",
        }
        _ipam(main, net, match_master=conf.ippools.match_master_subnet)
        _coordinator(main, net)
        plugins = [main]
        if conf.rdma_isolation:
            plugins.append({"type": "rdma"})
        plugins += chained
        if conf.mtu > 0:
            plugins.append({"type": "tuning", "mtu": conf.mtu})
        return plugins
    if net.cni_type == "ib-sriov":
        assert net.ibsriov is not None  # validated
        ib = net.ibsriov
        main = {
            "type": "ib-sriov",
            "pkey": ib.pkey,
            "link_state": ib.link_state,
            "rdmaIsolation": ib.rdma_isolation,
            "ibKubernetesEnabled": ib.enable_ib_kubernetes,
        }
        _ipam(main, net, match_master=False)
        _coordinator(main, net)
        return [main, *chained]
    raise ValueError(f"cniType {net.cni_type!r} is not rendered")  # validated


def _ipam(main: dict[str, Any], net: MultusConfig, match_master: bool) -> None:
    if net.disable_ipam:
        return
    pools = net.ippools
    ipam: dict[str, Any] = {"type": "spiderpool"}
    if pools.ipv4:
        ipam["default_ipv4_ippool"] = list(pools.ipv4)
    if pools.ipv6:
        ipam["default_ipv6_ippool"] = list(pools.ipv6)
    if match_master:
        ipam["match_master_subnet"] = True
    main["ipam"] = ipam


def _coordinator(main: dict[str, Any], net: MultusConfig) -> None:
    coordinator = net.coordinator
    if not net.enable_coordinator:
        main["policyRouting"] = False
        return
    if coordinator.pod_default_route_nic:
        main["podDefaultRouteNIC"] = coordinator.pod_default_route_nic
    if not coordinator.tune_pod_routes:
        main["policyRouting"] = False
    if coordinator.detect_ip_conflict is not None:
        main["detectIPConflict"] = coordinator.detect_ip_conflict
    if coordinator.detect_gateway is not None:
        main["detectGateway"] = coordinator.detect_gateway
    if coordinator.hijack_cidr:
        main["hijackCIDR"] = list(coordinator.hijack_cidr)
