# SPDX-License-Identifier: Apache-2.0
"""Spiderpool's SpiderMultusConfig rules, with its messages.

The messages are those of Spiderpool's SMC validating webhook and CRD markers
(so a user searching one finds Spiderpool's docs), with two departures: the
ib-sriov "only supports" message names ``spec.ibsriovConfig`` (Spiderpool's
names ``sriovConfig`` there by mistake), and cniVersion 1.1.0 is allowed
(our plugins speak it; Spiderpool stops at 1.0.0).

Rules that need more than one document (pools that must exist, names that
must be unique) are ``railyard.apply``'s.
"""

from __future__ import annotations

import ipaddress
import json
import re

from railyard.network import (
    CNI_VERSION,
    CR_NAME,
    INJECT_KEYS,
    NETWORK_INJECT,
    RDMA_INJECT,
    IbSriovConfig,
    MultusConfig,
    SriovConfig,
)

SUPPORTED_CNI_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
RENDERED_TYPES = ("sriov", "ib-sriov")
LINK_STATES = ("auto", "enable", "disable")
MAX_PKEY = 0x7FFF  # 15 bits; the top bit is the membership flag, set by the SM

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
# The inject annotations are copied to labels, so their values must be label values.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric character"
)


def validate(net: MultusConfig, pf_mtu: int | None = None) -> list[str]:
    """Every rule ``net`` breaks, in Spiderpool's order; empty when valid.

    ``pf_mtu`` is the MTU of the PF the network's VFs come from, when the node
    is known (``railyard apply --device-id``): a VF's MTU cannot exceed it.
    """
    errors = _annotations(net)
    if not net.cni_type:
        return [*errors, "CniType must not be nil"]
    if net.cni_type == "sriov":
        errors += _sriov(net, pf_mtu)
    elif net.cni_type == "ib-sriov":
        errors += _ibsriov(net)
    else:
        errors.append(
            f"cniType {net.cni_type} is not one railyard renders "
            f"({', '.join(RENDERED_TYPES)})"
        )
        return errors
    errors += _inject(net)
    errors += _chain(net)
    errors += _coordinator(net)
    return errors


def _annotations(net: MultusConfig) -> list[str]:
    errors = []
    if not _DNS1123_SUBDOMAIN.match(net.name) or len(net.name) > 253:
        errors.append(f"invalid name {net.name!r}: {_DNS1123_MESSAGE}")
    custom = net.annotations.get(CR_NAME)
    if custom is not None and (
        not _DNS1123_SUBDOMAIN.match(custom) or len(custom) > 253
    ):
        errors.append(
            f"invalid custom net-attach-def resource name, err: {_DNS1123_MESSAGE}"
        )
    for key in INJECT_KEYS:
        group = net.annotations.get(key)
        if group is not None and (not _LABEL_VALUE.match(group) or len(group) > 63):
            errors.append(
                f"invalid {key} {group!r}: the group becomes a label value (at most "
                "63 alphanumerics, '-', '_' or '.', starting and ending with an "
                "alphanumeric)"
            )
    for version in (net.annotations.get(CNI_VERSION), net.spec_cni_version or None):
        if version is not None and version not in SUPPORTED_CNI_VERSIONS:
            errors.append(
                f"unsupported CNI version {version} (railyard renders "
                f"{', '.join(SUPPORTED_CNI_VERSIONS)})"
            )
    return errors


def _sriov(net: MultusConfig, pf_mtu: int | None) -> list[str]:
    conf: SriovConfig | None = net.sriov
    if conf is None:
        return ["no spec.sriovConfig specified"]
    errors = []
    if net.other_configs:
        errors.append(
            "the cniType sriov only supports spec.sriovConfig, "
            "please remove other CNI configs"
        )
    if not 0 <= conf.vlan_id <= 4094:
        errors.append(
            f"invalid vlanId {conf.vlan_id}, please make sure vlanId in range [0,4094]"
        )
    if conf.mtu < 0:
        errors.append("MTU must be greater than or equal to 0")
    elif pf_mtu is not None and conf.mtu > pf_mtu:
        errors.append(f"mtu {conf.mtu} is above the MTU of the PF ({pf_mtu})")
    for key, value in (
        ("minTxRateMbps", conf.min_tx_rate),
        ("maxTxRateMbps", conf.max_tx_rate),
    ):
        if value < 0:
            errors.append(
                f"spec.sriov.{key}: Invalid value: {value}: spec.sriov.{key} "
                "in body should be greater than or equal to 0"
            )
    if conf.min_tx_rate > conf.max_tx_rate:
        errors.append("minTxRateMbps must be less than maxTxRateMbps")
    if not conf.resource_name:
        errors.append("no spec.sriovConfig[resourceName] specified")
    return errors


def _ibsriov(net: MultusConfig) -> list[str]:
    conf: IbSriovConfig | None = net.ibsriov
    if conf is None:
        return ["no spec.ibsriovConfig specified"]
    errors = []
    if net.other_configs:
        errors.append(
            "the cniType ib-sriov only supports spec.ibsriovConfig, "
            "please remove other CNI configs"
        )
    if conf.link_state not in LINK_STATES:
        allowed = ", ".join(f'"{s}"' for s in LINK_STATES)
        errors.append(
            f'spec.ibsriov.linkState: Unsupported value: "{conf.link_state}": '
            f"supported values: {allowed}"
        )
    if conf.pkey and not _valid_pkey(conf.pkey):
        errors.append(
            f"invalid pkey {conf.pkey!r}: a hexadecimal partition key "
            f"0x0001..0x{MAX_PKEY:04x}"
        )
    if not conf.resource_name:
        errors.append("no spec.ibsriovConfig[resourceName] specified")
    return errors


def _valid_pkey(pkey: str) -> bool:
    digits = pkey[2:] if pkey.lower().startswith("0x") else pkey
    try:
        value = int(digits, 16)
    except ValueError:
        return False
    return 0 < value <= MAX_PKEY


def _inject(net: MultusConfig) -> list[str]:
    errors = []
    who = f"spidermultusconfig {net.namespace}/{net.name}"
    if RDMA_INJECT in net.annotations:
        if not net.resource_name:
            errors.append(f"rdmaResourceName can not empty for {who}")
        if not net.ippools:
            errors.append(f"no any ippools configured for {who}")
    elif NETWORK_INJECT in net.annotations and net.resource_name and not net.ippools:
        errors.append(f"no any ippools configured for {who}")
    return errors


def _chain(net: MultusConfig) -> list[str]:
    errors = []
    for raw in net.chain_cni:
        try:
            conf = json.loads(raw)
        except ValueError as exc:
            errors.append(f"invalid {raw}: {exc}")
            continue
        if not isinstance(conf, dict) or not isinstance(conf.get("type"), str):
            errors.append(f"invalid {raw}: a plugin config needs a string 'type'")
    return errors


def _coordinator(net: MultusConfig) -> list[str]:
    coordinator = net.coordinator
    errors = []
    if coordinator.tx_queue_len < 0:
        errors.append("txQueueLen can't be less than 0")
    if coordinator.veth_link_address:
        try:
            ipaddress.ip_address(coordinator.veth_link_address)
        except ValueError:
            errors.append("vethLinkAddress is an invalid IP address")
    if coordinator.veth_mtu is not None and coordinator.veth_mtu <= 0:
        errors.append("vethMTU must be greater than 0")
    for cidr in coordinator.hijack_cidr:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            errors.append(f"hijackCIDR {cidr!r} is not a CIDR")
    return errors
