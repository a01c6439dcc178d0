# SPDX-License-Identifier: Apache-2.0
"""SpiderMultusConfig v2beta1: the model, read as the guide writes it.

Parsing applies the defaults Spiderpool's SMC mutating webhook materialises
(sriov: vlan 0, rates 0, mtu 0, rdmaIsolation false; ib-sriov: linkState
enable, rdmaIsolation **true**; coordinator absent -> tunePodRoutes true,
present without the key -> false, Spiderpool's asymmetric default) and takes
the guide's drift:

- ``enableRdma`` (the guide's key) means ``rdmaIsolation``. Spiderpool renamed
  it and the API server now prunes the old key, so the guide silently yields
  no rdma plugin there; here both work.
- ``ippools`` under ``sriov`` / ``ibsriov`` or directly under ``spec``
  (04-inject-network.yaml), and ``matchMasterSubnet`` under ``sriov`` or under
  ``ippools``.
- ``pkey`` written as a YAML integer (``pkey: 1000``) is read as the digits
  the user typed; partition keys are always hexadecimal (ib-sriov reads
  ``1000`` as 0x1000).

Type errors (a string where a number belongs, ...) raise ``NetworkError``
naming the field; Spiderpool's semantic rules live in ``railyard.validate``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CR_NAME = "multus.spidernet.io/cr-name"
CNI_VERSION = "multus.spidernet.io/cni-version"
CNICONFIG_NAME = "cni.spidernet.io/cniconfig-name"
RDMA_INJECT = "cni.spidernet.io/rdma-resource-inject"
NETWORK_INJECT = "cni.spidernet.io/network-resource-inject"
INJECT_KEYS = (RDMA_INJECT, NETWORK_INJECT)
# Spiderpool renders 0.3.1; multus delegates at the network's version and a
# runtime whose multus speaks 1.1.0 refuses 0.3.1 delegates (OpenShift 4.23,
# Calico #12965), so ours default to 1.0.0, which every current multus takes.
# ``spec.cniVersion`` (or Spiderpool's cni-version annotation) selects another.
DEFAULT_CNI_VERSION = "1.0.0"


class NetworkError(ValueError):
    """A SpiderMultusConfig field has the wrong shape; the message names it."""


@dataclass(frozen=True, slots=True)
class IPPools:
    ipv4: tuple[str, ...] = ()
    ipv6: tuple[str, ...] = ()
    match_master_subnet: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return self.ipv4 + self.ipv6

    def __bool__(self) -> bool:
        return bool(self.ipv4 or self.ipv6)


@dataclass(frozen=True, slots=True)
class SriovConfig:
    resource_name: str = ""
    vlan_id: int = 0
    mtu: int = 0
    min_tx_rate: int = 0
    max_tx_rate: int = 0
    rdma_isolation: bool = False
    ippools: IPPools = IPPools()


@dataclass(frozen=True, slots=True)
class IbSriovConfig:
    resource_name: str = ""
    pkey: str = ""
    link_state: str = "enable"
    rdma_isolation: bool = True
    enable_ib_kubernetes: bool = False
    ippools: IPPools = IPPools()


@dataclass(frozen=True, slots=True)
class Coordinator:
    """The coordinator settings our plugins do themselves.

    ``None`` = not set: the plugin's default applies. ``ignored`` lists the
    coordinator keys that have no equivalent in our plugins (veth mode,
    hijackCIDR, ...), so apply can say so instead of dropping them silently.
    """

    tune_pod_routes: bool = True
    pod_default_route_nic: str = ""
    detect_ip_conflict: bool | None = None
    detect_gateway: bool | None = None
    tx_queue_len: int = 0
    veth_link_address: str = ""
    veth_mtu: int | None = None
    hijack_cidr: tuple[str, ...] = ()  # routed via eth0 from every rail
    ignored: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MultusConfig:
    """One SpiderMultusConfig, defaults applied."""

    name: str
    namespace: str
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    cni_type: str  # "" when the document has none (a validation error)
    sriov: SriovConfig | None = None
    ibsriov: IbSriovConfig | None = None
    other_configs: tuple[str, ...] = ()  # config blocks of other cniTypes present
    enable_coordinator: bool = True
    disable_ipam: bool = False
    coordinator: Coordinator = Coordinator()
    chain_cni: tuple[str, ...] = ()  # chainCNIJsonData, raw JSON strings
    spec_cni_version: str = ""  # spec.cniVersion; "" when absent
    where: str = ""
    unknown_keys: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def nad_name(self) -> str:
        return self.annotations.get(CR_NAME) or self.name

    @property
    def cni_version(self) -> str:
        """spec.cniVersion, else Spiderpool's annotation, else 1.0.0."""
        return (
            self.spec_cni_version
            or self.annotations.get(CNI_VERSION)
            or DEFAULT_CNI_VERSION
        )

    @property
    def conflist_name(self) -> str:
        return self.annotations.get(CNICONFIG_NAME) or self.nad_name

    @property
    def resource_name(self) -> str:
        config = self.sriov or self.ibsriov
        return config.resource_name if config else ""

    @property
    def ippools(self) -> IPPools:
        config = self.sriov or self.ibsriov
        return config.ippools if config else IPPools()

    @property
    def inject_labels(self) -> dict[str, str]:
        """The inject annotations, which Spiderpool copies to labels so the pod
        webhook can select by them; the NAD carries them the same way."""
        return {k: self.annotations[k] for k in INJECT_KEYS if k in self.annotations}


# Config blocks of the cniTypes Spiderpool knows, by their JSON key.
CONFIG_BLOCKS = ("macvlan", "ipvlan", "sriov", "ovs", "ibsriov", "ipoib", "customCNI")
_SPEC_KEYS = set(CONFIG_BLOCKS) | {
    "cniType",
    "enableCoordinator",
    "disableIPAM",
    "coordinator",
    "chainCNIJsonData",
    "ippools",  # the guide's placement (04-inject-network.yaml)
    "cniVersion",
}
_COORDINATOR_OURS = {
    "tunePodRoutes",
    "podDefaultRouteNIC",
    "detectIPConflict",
    "detectGateway",
    "txQueueLen",
    "vethLinkAddress",
    "vethMTU",
    "hijackCIDR",
}


def parse(body: Mapping[str, Any], where: str = "") -> MultusConfig:
    """A SpiderMultusConfig document (already known to be of that kind)."""
    meta = _mapping(body.get("metadata"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise NetworkError("metadata.name is required (a string)")
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise NetworkError("metadata.namespace must be a string")
    annotations = _string_map(meta.get("annotations"), "metadata.annotations")
    labels = _string_map(meta.get("labels"), "metadata.labels")
    spec = _mapping(body.get("spec"), "spec")

    cni_type = spec.get("cniType") or ""
    if not isinstance(cni_type, str):
        raise NetworkError(f"spec.cniType must be a string, got {cni_type!r}")
    spec_pools = _ippools(spec.get("ippools"), "spec.ippools", None)
    sriov = ibsriov = None
    if spec.get("sriov") is not None:
        sriov = _sriov(_mapping(spec["sriov"], "spec.sriov"), spec_pools)
    if spec.get("ibsriov") is not None:
        ibsriov = _ibsriov(_mapping(spec["ibsriov"], "spec.ibsriov"), spec_pools)
    own = {"sriov": "sriov", "ib-sriov": "ibsriov"}.get(cni_type)
    others = tuple(k for k in CONFIG_BLOCKS if k != own and spec.get(k) is not None)

    enable_coordinator = _bool(spec, "enableCoordinator", True, "spec")
    chain = spec.get("chainCNIJsonData") or []
    if not isinstance(chain, list) or not all(isinstance(c, str) for c in chain):
        raise NetworkError("spec.chainCNIJsonData must be a list of JSON strings")
    return MultusConfig(
        name=name,
        namespace=namespace,
        annotations=annotations,
        labels=labels,
        cni_type=cni_type,
        sriov=sriov,
        ibsriov=ibsriov,
        other_configs=others,
        enable_coordinator=enable_coordinator,
        disable_ipam=_bool(spec, "disableIPAM", False, "spec"),
        coordinator=_coordinator(spec.get("coordinator")),
        chain_cni=tuple(chain),
        spec_cni_version=_str(spec, "cniVersion", "spec"),
        where=where,
        unknown_keys=tuple(sorted(set(spec) - _SPEC_KEYS)),
    )


def _sriov(raw: Mapping[str, Any], spec_pools: IPPools | None) -> SriovConfig:
    where = "spec.sriov"
    # matchMasterSubnet directly under sriov is the guides' placement
    master = _bool(raw, "matchMasterSubnet", False, where)
    pools = _ippools(raw.get("ippools"), f"{where}.ippools", master)
    return SriovConfig(
        resource_name=_str(raw, "resourceName", where),
        vlan_id=_int(raw, "vlanID", where),
        mtu=_int(raw, "mtu", where),
        min_tx_rate=_int(raw, "minTxRateMbps", where),
        max_tx_rate=_int(raw, "maxTxRateMbps", where),
        rdma_isolation=_bool(raw, "rdmaIsolation", False, where)
        or _bool(raw, "enableRdma", False, where),
        ippools=pools or _with_master(spec_pools, master),
    )


def _ibsriov(raw: Mapping[str, Any], spec_pools: IPPools | None) -> IbSriovConfig:
    where = "spec.ibsriov"
    # ib-sriov isolates by default (Spiderpool's webhook default is true)
    rdma_key = "rdmaIsolation" if "rdmaIsolation" in raw else "enableRdma"
    pkey = raw.get("pkey")
    if isinstance(pkey, bool) or not isinstance(pkey, str | int | type(None)):
        raise NetworkError(f"{where}.pkey must be a string, got {pkey!r}")
    pools = _ippools(raw.get("ippools"), f"{where}.ippools", None)
    return IbSriovConfig(
        resource_name=_str(raw, "resourceName", where),
        pkey="" if pkey is None else str(pkey),
        link_state=_str(raw, "linkState", where) or "enable",
        rdma_isolation=_bool(raw, rdma_key, True, where),
        enable_ib_kubernetes=_bool(raw, "enableIbKubernetes", False, where),
        ippools=pools or spec_pools or IPPools(),
    )


def _with_master(pools: IPPools | None, master: bool) -> IPPools:
    if pools is None:
        return IPPools()
    if master and not pools.match_master_subnet:
        return IPPools(pools.ipv4, pools.ipv6, True)
    return pools


def _ippools(raw: Any, where: str, master: bool | None) -> IPPools | None:
    if raw is None:
        return None
    data = _mapping(raw, where)
    ipv4 = _names(data.get("ipv4"), f"{where}.ipv4")
    ipv6 = _names(data.get("ipv6"), f"{where}.ipv6")
    mms = _bool(data, "matchMasterSubnet", False, where) or bool(master)
    return IPPools(ipv4, ipv6, mms)


def _coordinator(raw: Any) -> Coordinator:
    if raw is None:
        # Spiderpool's webhook fills an absent coordinator with
        # tunePodRoutes=true (and a present one's unset field with false).
        return Coordinator()
    data = _mapping(raw, "spec.coordinator")
    where = "spec.coordinator"
    ignored = tuple(
        sorted(k for k, v in data.items() if k not in _COORDINATOR_OURS and v)
    )
    veth_mtu = data.get("vethMTU")
    return Coordinator(
        tune_pod_routes=_bool(data, "tunePodRoutes", False, where),
        pod_default_route_nic=_str(data, "podDefaultRouteNIC", where),
        detect_ip_conflict=_opt_bool(data, "detectIPConflict", where),
        detect_gateway=_opt_bool(data, "detectGateway", where),
        tx_queue_len=_int(data, "txQueueLen", where),
        veth_link_address=_str(data, "vethLinkAddress", where),
        veth_mtu=None if veth_mtu is None else _int(data, "vethMTU", where),
        hijack_cidr=_names(data.get("hijackCIDR"), f"{where}.hijackCIDR"),
        ignored=ignored,
    )


# ----------------------------------------------------------------- fields


def _mapping(raw: Any, where: str) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise NetworkError(f"{where} must be a mapping, got {type(raw).__name__}")
    return raw


def _string_map(raw: Any, where: str) -> dict[str, str]:
    data = _mapping(raw, where)
    out = {}
    for key, value in data.items():
        if not isinstance(value, str):
            # the API server refuses non-string annotation values too
            raise NetworkError(f"{where}[{key}] must be a string, got {value!r}")
        out[str(key)] = value
    return out


def _names(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise NetworkError(f"{where} must be a list of pool names")
    if not all(isinstance(n, str) and n for n in raw):
        raise NetworkError(f"{where} must be a list of pool names, got {list(raw)!r}")
    return tuple(raw)


def _str(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise NetworkError(f"{where}.{key} must be a string, got {value!r}")
    return value


def _int(data: Mapping[str, Any], key: str, where: str) -> int:
    value = data.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise NetworkError(f"{where}.{key} must be an integer, got {value!r}")
    return value


def _bool(data: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = _opt_bool(data, key, where)
    return default if value is None else value


def _opt_bool(data: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise NetworkError(f"{where}.{key} must be true or false, got {value!r}")
    return value
