# SPDX-License-Identifier: Apache-2.0
"""Our plugins as Multus delegates (the harness in multus.py reproduces Multus).

What reaches a delegate under Multus is pinned from the plugins' side: the
stdin and env each plugin process got are recorded by the harness and checked
here, next to the kernel state the plugins produced.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from . import netview
from .assertions import assert_all_returned, assert_allocated, assert_rail_nic
from .multus import Attachment, DelegateError, Multus, Pod

pytestmark = pytest.mark.integration


def make_pod(netns: str) -> Pod:
    """A pod as kubelet describes it to Multus (the sandbox ID is CNI_CONTAINERID)."""
    sandbox = uuid.uuid4().hex + uuid.uuid4().hex  # 64 hex, like a CRI sandbox ID
    return Pod(
        namespace="ai-team",
        name="trainer-0",
        uid=str(uuid.uuid4()),
        sandbox_id=sandbox,
        netns=netns,
    )


def test_multus_delegates_sriov_rdma_nad_with_injected_device_and_pod_args(
    make_host, rp_netns, tmp_short: Path, request: pytest.FixtureRequest
) -> None:
    host = make_host(rails=1, vfs_per_pf=2)
    rail, vf = host.rail(1), host.vf(1, 1)
    pod = make_pod(rp_netns())
    mac = "02:00:5e:10:00:02"
    nad = Attachment(
        nad_namespace="ai-team",
        nad_name="rail1-rdma",
        config={
            "cniVersion": "0.4.0",
            "name": "rail1-rdma",
            "plugins": [
                {
                    "type": "sriov",
                    "capabilities": {"mac": True},
                    "ipam": {
                        "type": "spiderpool",
                        "default_ipv4_ippool": [rail.pool_v4],
                    },
                },
                {"type": "rdma"},
            ],
        },
        resource_device_id=vf.pci,
        interface="net1",
        mac=mac,
    )
    multus = Multus(
        [host.cni_bin_dir, Path("/usr/lib/cni")],
        tmp_short / "multus-cache",
        env={**os.environ, **host.env},
    )

    request.addfinalizer(lambda: multus.delete(pod, [nad], check=False))
    multus.add(pod, [nad])
    address = assert_rail_nic(host, pod.netns, "net1", rail, vf, rdma=True)
    assert netview.nic("net1", pod.netns).mac == mac
    assert_allocated(host, pod.sandbox_id, {"net1": address})
    (alloc,) = host.allocations_of(pod.sandbox_id)
    # the plugin read the pod identity out of Multus's CNI_ARGS
    assert (alloc["podNamespace"], alloc["podName"], alloc["podUID"]) == (
        pod.namespace,
        pod.name,
        pod.uid,
    )

    sriov, rdma = multus.calls
    for call in (sriov, rdma):
        assert call.env["CNI_ARGS"] == (
            f"IgnoreUnknown=true;K8S_POD_NAMESPACE=ai-team;K8S_POD_NAME=trainer-0;"
            f"K8S_POD_INFRA_CONTAINER_ID={pod.sandbox_id};K8S_POD_UID={pod.uid}"
        )
        assert call.stdin["deviceID"] == call.stdin["pciBusID"] == vf.pci
        assert call.stdin["cniVersion"] == "0.4.0"
    # deviceID is offered as a capability too, but neither plugin declares it
    assert sriov.stdin["runtimeConfig"] == {"mac": mac}
    assert "runtimeConfig" not in rdma.stdin
    assert rdma.stdin["prevResult"] == sriov.result

    multus.delete(pod, [nad])
    assert [(c.plugin, c.command) for c in multus.calls[2:]] == [
        ("rdma", "DEL"),
        ("sriov", "DEL"),
    ]
    assert netview.nic("net1", pod.netns) is None
    assert_all_returned(host)


def test_multus_delegates_ib_sriov_nad_with_an_infiniband_guid(
    make_host, rp_netns, tmp_short: Path, request: pytest.FixtureRequest
) -> None:
    host = make_host(rails=0, ib_rails=1)
    rail, vf = host.rail(1), host.vf(1, 0)
    original_guid = host.vf_record(rail, vf)["node_guid"]
    guid = "c2:9e:5a:00:00:00:10:01"
    pod = make_pod(rp_netns())
    nad = Attachment(
        nad_namespace="ai-team",
        nad_name="ib-rail1",
        # ib-sriov-cni's README form: one plugin, not a conflist
        config={
            "cniVersion": "0.3.1",
            "name": "ib-rail1",
            "type": "ib-sriov",
            "link_state": "enable",
            "rdmaIsolation": True,
            "capabilities": {"infinibandGUID": True},
            "ipam": {"type": "spiderpool", "default_ipv4_ippool": [rail.pool_v4]},
        },
        resource_device_id=vf.pci,
        infiniband_guid=guid,
    )
    multus = Multus(
        [host.cni_bin_dir, Path("/usr/lib/cni")],
        tmp_short / "multus-cache",
        env={**os.environ, **host.env},
    )

    request.addfinalizer(lambda: multus.delete(pod, [nad], check=False))
    multus.add(pod, [nad])
    (call,) = multus.calls
    assert call.stdin["runtimeConfig"] == {"infinibandGUID": guid}
    assert call.stdin["deviceID"] == call.stdin["pciBusID"] == vf.pci
    assert call.env["CNI_IFNAME"] == "net1"  # Multus's default: net<position>
    address = assert_rail_nic(host, pod.netns, "net1", rail, vf, rdma=True)
    assert_allocated(host, pod.sandbox_id, {"net1": address})
    assert host.vf_record(rail, vf)["node_guid"] == guid

    multus.delete(pod, [nad])
    assert netview.nic("net1", pod.netns) is None
    assert host.vf_record(rail, vf)["node_guid"] == original_guid
    assert_all_returned(host)


def test_multus_failed_second_delegate_leaves_no_vf_or_address_behind(
    make_host, rp_netns, tmp_short: Path
) -> None:
    host = make_host(rails=2)
    pod = make_pod(rp_netns())

    def rail_nad(n: int, pool: str) -> Attachment:
        return Attachment(
            nad_namespace="ai-team",
            nad_name=f"rail{n}",
            config={
                "cniVersion": "1.0.0",
                "name": f"rail{n}",
                "type": "sriov",
                "ipam": {"type": "spiderpool", "default_ipv4_ippool": [pool]},
            },
            resource_device_id=host.vf(n, 0).pci,
        )

    nads = [rail_nad(1, host.rail(1).pool_v4), rail_nad(2, "no-such-pool")]
    multus = Multus(
        [host.cni_bin_dir], tmp_short / "cache", env={**os.environ, **host.env}
    )

    with pytest.raises(DelegateError) as failed:
        multus.add(pod, nads)
    assert "no-such-pool" in str(failed.value)
    # Multus's cmdAdd DELs every delegate up to the failed one, in reverse
    assert [(c.plugin, c.command, c.env["CNI_IFNAME"]) for c in multus.calls] == [
        ("sriov", "ADD", "net1"),
        ("sriov", "ADD", "net2"),
        ("sriov", "DEL", "net2"),
        ("sriov", "DEL", "net1"),
    ]
    assert [c.returncode for c in multus.calls[2:]] == [0, 0]
    assert netview.link_names(pod.netns) == {"lo"}
    assert_all_returned(host)
