# SPDX-License-Identifier: Apache-2.0
"""The webhook's pure selection: which networks, which order, which limits."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest

from railyard.webhook.selection import (
    NETWORK_INJECT,
    RDMA_INJECT,
    InjectError,
    InjectRequest,
    Network,
    inject_request,
    patch_for,
    select,
)

GROUP = InjectRequest(RDMA_INJECT, "rdma-network")


def nad(
    name: str,
    resource: str,
    namespace: str = "spiderpool",
    pools: list[str] | None = None,
    group: str = "rdma-network",
) -> dict[str, Any]:
    config = {
        "cniVersion": "0.3.1",
        "name": name,
        "plugins": [
            {
                "type": "sriov",
                "ipam": {"type": "spiderpool", "default_ipv4_ippool": pools or ["p"]},
            }
        ],
    }
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {RDMA_INJECT: group},
            "annotations": {"k8s.v1.cni.cncf.io/resourceName": resource},
        },
        "spec": {"config": json.dumps(config)},
    }


def pod(**container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": "ai"},
        "spec": {"containers": [{"name": "main", "image": "x", **container}]},
    }


def mutate(the_pod: dict[str, Any], nads: list[dict[str, Any]]) -> dict[str, Any]:
    chosen = select(GROUP, [Network.from_nad(n) for n in nads])
    result: dict[str, Any] = jsonpatch.apply_patch(the_pod, patch_for(the_pod, chosen))
    return result


def test_the_pod_annotation_wins_over_the_namespace() -> None:
    assert inject_request(
        {NETWORK_INJECT: "pods"}, {RDMA_INJECT: "ns"}
    ) == InjectRequest(NETWORK_INJECT, "pods")


def test_the_namespace_annotation_is_the_fallback() -> None:
    assert inject_request({}, {RDMA_INJECT: "ns"}) == InjectRequest(
        RDMA_INJECT, "ns", from_namespace=True
    )
    assert inject_request(None, None) is None


def test_eight_rails_in_a_stable_order_with_one_vf_each() -> None:
    nads = [
        nad(f"gpu{n}-sriov", f"spidernet.io/gpu{n}rdma")
        for n in (3, 1, 8, 2, 7, 5, 4, 6)
    ]
    result = mutate(pod(), nads)
    assert result["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == ",".join(
        f"spiderpool/gpu{n}-sriov" for n in range(1, 9)
    )
    assert result["spec"]["containers"][0]["resources"]["limits"] == {
        f"spidernet.io/gpu{n}rdma": "1" for n in range(1, 9)
    }


def test_a_custom_nad_name_is_what_the_pod_names() -> None:
    # Spiderpool writes the SMC's name here even when the NAD is called otherwise
    result = mutate(pod(), [nad("rail-one", "spidernet.io/gpu1rdma")])
    assert result["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == (
        "spiderpool/rail-one"
    )


def test_two_networks_on_one_resource_ask_for_two_vfs() -> None:
    nads = [nad("a", "spidernet.io/shared"), nad("b", "spidernet.io/shared")]
    result = mutate(pod(), nads)
    assert result["spec"]["containers"][0]["resources"]["limits"] == {
        "spidernet.io/shared": "2"
    }


def test_a_resource_already_asked_for_is_left_alone() -> None:
    the_pod = pod(resources={"limits": {"spidernet.io/gpu1rdma": "1", "cpu": "2"}})
    result = mutate(
        the_pod, [nad("a", "spidernet.io/gpu1rdma"), nad("b", "spidernet.io/gpu2rdma")]
    )
    assert result["spec"]["containers"][0]["resources"]["limits"] == {
        "spidernet.io/gpu1rdma": "1",
        "cpu": "2",
        "spidernet.io/gpu2rdma": "1",
    }


def test_existing_networks_annotation_is_replaced() -> None:
    the_pod = pod()
    the_pod["metadata"]["annotations"] = {
        "k8s.v1.cni.cncf.io/networks": "old/net",
        "keep": "me",
    }
    result = mutate(the_pod, [nad("a", "spidernet.io/r")])
    assert result["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/networks": "spiderpool/a",
        "keep": "me",
    }


def test_only_the_groups_networks_are_taken() -> None:
    nads = [nad("a", "spidernet.io/r"), nad("b", "spidernet.io/s", group="other")]
    chosen = select(GROUP, [Network.from_nad(n) for n in nads])
    assert [n.name for n in chosen] == ["a"]


@pytest.mark.parametrize(
    ("nads", "message"),
    [
        (
            [],
            "no spidermultusconfigs with annotation: "
            "cni.spidernet.io/rdma-resource-inject:rdma-network found",
        ),
        (
            [nad("a", "")],
            "rdmaResourceName can not empty for spidermultusconfig spiderpool/a",
        ),
    ],
)
def test_spiderpools_errors(nads: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(InjectError) as failed:
        select(GROUP, [Network.from_nad(n) for n in nads])
    assert str(failed.value) == message


def test_a_network_without_pools_is_an_error() -> None:
    without = nad("a", "spidernet.io/r")
    conf = json.loads(without["spec"]["config"])
    conf["plugins"][0]["ipam"] = {"type": "spiderpool"}
    without["spec"]["config"] = json.dumps(conf)
    with pytest.raises(
        InjectError,
        match="no any ippools configured for spidermultusconfig spiderpool/a",
    ):
        select(GROUP, [Network.from_nad(without)])
