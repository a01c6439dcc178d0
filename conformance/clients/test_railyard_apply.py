# SPDX-License-Identifier: Apache-2.0
"""Real clients on the simulated host, from ``railyard apply``'s output only.

The reference guide's documents (tests/unit/railyard/seed/, verbatim) are
applied with the installed ``railyard`` against the host's ipamd; what the
clients then read is the conflist railyard wrote (podman, cnitool) or the
NetworkAttachmentDefinition it wrote (the Multus harness). Nothing here
writes a network config by hand.

Without a device plugin, a runtime learns its VF from the conflist: ``apply
--device-id RESOURCE=PCI`` writes it where Multus would inject it. Under
Multus the NAD carries no device; the harness maps the NAD's
``k8s.v1.cni.cncf.io/resourceName`` to a VF as kubelet's device manager does.

The seed's pools are the guide's 172.16.11.0/16 with gateway 172.16.11.254:
the simulated rail 1 holds that gateway on its fabric bridge, so the traffic
stays inside the netns this suite created.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from pathlib import Path

import pytest
import yaml

from railyard_sim.lab import RailSpec

from . import netview
from .assertions import assert_all_returned, assert_allocated, assert_rail_nic
from .commands import run
from .host import SimHost, wait_for
from .multus import Attachment, Multus, Pod
from .runtimes import IMAGE
from .test_cnitool import cnitool_container_id, cnitool_env, deleted_at_exit

pytestmark = pytest.mark.integration

SEED = Path(__file__).resolve().parents[2] / "tests" / "unit" / "railyard" / "seed"
GO_PLUGINS = Path("/usr/lib/cni")  # tuning, which Spiderpool's MTU setting chains


@pytest.fixture
def railyard(installation) -> str:
    return str(installation.tool("railyard"))


def railyard_apply(railyard: str, host: SimHost, *args: str, stdin: str = "") -> str:
    out = run(
        [railyard, "apply", "--socket", str(host.ipamd.socket), *args],
        input=stdin,
        timeout=120,
    )
    return out.stdout


def with_guide_pool(host: SimHost) -> RailSpec:
    """Rail 1 as the guide's own pool defines it: gpu1-net11 is a /16 there
    (the same gateway). The host's /24 pool of that name is deleted first, as
    ipamd (like Spiderpool) refuses to change the subnet of a pool."""
    host.ipamd.check("pool", "delete", "gpu1-net11")
    return dataclasses.replace(host.rail(1), subnet_v4="172.16.0.0/16")


def test_podman_runs_on_the_rendered_roce_network_with_mtu_and_rdma(
    railyard: str, make_host, make_podman
) -> None:
    host = make_host(rails=1)
    rail, vf = host.rail(1), host.vf(1, 0)
    podman = make_podman([host.cni_bin_dir, GO_PLUGINS], host.env)
    # 05 names gpu1-net11 without defining it: the host's ipamd has it
    report = railyard_apply(
        railyard,
        host,
        "-f",
        str(SEED / "05-mtu-network.yaml"),
        "--cni-conf-dir",
        str(podman.net_dir),
        "--device-id",
        f"spidernet.io/gpu1sriov={vf.pci}",
    )
    assert report == (
        f"network spiderpool/gpu1-sriov: {podman.net_dir}/gpu1-sriov.conflist created\n"
    )
    name = f"rp{uuid.uuid4().hex[:8]}"
    podman(
        "run", "-d", "--rm", "--name", name,
        "--network", "gpu1-sriov:interface_name=net1",
        IMAGE, "sleep", "120",
        timeout=120,
    )  # fmt: skip
    try:
        sandbox = podman(
            "inspect", "--format", "{{.NetworkSettings.SandboxKey}}", name
        ).stdout.strip()
        cid = podman("inspect", "--format", "{{.Id}}", name).stdout.strip()
        address = assert_rail_nic(host, sandbox, "net1", rail, vf, mtu=8000, rdma=True)
        # what the container itself sees
        inside = netview.busybox_addrs(podman("exec", name, "ip", "addr").stdout)
        assert inside["net1"].ipv4 == (address,)
        assert "mtu 8000" in podman("exec", name, "ip", "link", "show", "net1").stdout
        assert_allocated(host, cid, {"net1": address})
    finally:
        podman("stop", "--time", "0", name, check=False, timeout=120)
    wait_for(lambda: not podman.exists(name), 60, "podman to remove the container")
    assert_all_returned(host, within=10)


def test_cnitool_add_check_del_on_the_rendered_conflist(
    railyard: str, cnitool: str, make_host, rp_netns, tmp_short: Path
) -> None:
    host = make_host(rails=1)
    vf = host.vf(1, 0)
    rail = with_guide_pool(host)
    netns = rp_netns()
    net_dir = tmp_short / "net.d"
    # the guide's 02 as written (its pool too), asking for CNI 1.0.0 (our
    # default too) so that libcni runs CHECK (0.3.1, Spiderpool's default, has
    # none; Debian's libcni 1.1.2 does not parse 1.1.0 results yet)
    guide = (SEED / "02-roce-pool-and-network.yaml").read_text()
    document = guide.replace(
        "  namespace: spiderpool\n",
        "  namespace: spiderpool\n"
        "  annotations:\n"
        '    multus.spidernet.io/cni-version: "1.0.0"\n',
    )
    report = railyard_apply(
        railyard, host, "-f", "-", "--cni-conf-dir", str(net_dir),
        "--device-id", f"spidernet.io/gpu1sriov={vf.pci}",
        stdin=document,
    )  # fmt: skip
    assert report.splitlines()[0] == "spiderippool/gpu1-net11 created"
    rendered = json.loads((net_dir / "gpu1-sriov.conflist").read_text())
    assert rendered["cniVersion"] == "1.0.0"
    env = cnitool_env(host, net_dir, "net1")
    cid = cnitool_container_id(netns)

    with deleted_at_exit(cnitool, "gpu1-sriov", netns, env):
        added = json.loads(run([cnitool, "add", "gpu1-sriov", netns], env=env).stdout)
        address = assert_rail_nic(host, netns, "net1", rail, vf, rdma=True)
        assert address.endswith("/16")
        assert [i["address"] for i in added["ips"]] == [address]
        assert_allocated(host, cid, {"net1": address})

        run([cnitool, "check", "gpu1-sriov", netns], env=env)

        run([cnitool, "del", "gpu1-sriov", netns], env=env)
        assert netview.nic("net1", netns) is None
        assert_all_returned(host)


def test_multus_delegates_the_rendered_nad_with_its_resource_device(
    railyard: str, make_host, rp_netns, tmp_short: Path, request: pytest.FixtureRequest
) -> None:
    host = make_host(rails=1, vfs_per_pf=2)
    vf = host.vf(1, 1)
    rail = with_guide_pool(host)
    # kubelet's device manager: the resource's allocated device for this pod
    allocated = {"spidernet.io/gpu1rdma": vf.pci}
    nad_dir = tmp_short / "nads"
    railyard_apply(
        railyard, host, "-f", str(SEED / "04-inject-network.yaml"),
        "--nad-out", str(nad_dir),
    )  # fmt: skip
    (nad_file,) = nad_dir.iterdir()
    nad = yaml.safe_load(nad_file.read_text())
    resource = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
    attachment = Attachment(
        nad_namespace=nad["metadata"]["namespace"],
        nad_name=nad["metadata"]["name"],
        config=json.loads(nad["spec"]["config"]),
        resource_device_id=allocated[resource],
    )
    pod = Pod(
        namespace="ai-team",
        name="trainer-0",
        uid=str(uuid.uuid4()),
        sandbox_id=uuid.uuid4().hex + uuid.uuid4().hex,
        netns=rp_netns(),
    )
    multus = Multus(
        [host.cni_bin_dir, GO_PLUGINS],
        tmp_short / "multus-cache",
        env={**os.environ, **host.env},
    )
    request.addfinalizer(lambda: multus.delete(pod, [attachment], check=False))

    multus.add(pod, [attachment])

    address = assert_rail_nic(host, pod.netns, "net1", rail, vf, rdma=True)
    assert_allocated(host, pod.sandbox_id, {"net1": address})
    sriov, rdma = multus.calls
    assert (sriov.plugin, rdma.plugin) == ("sriov", "rdma")
    for call in (sriov, rdma):
        assert call.stdin["deviceID"] == call.stdin["pciBusID"] == vf.pci
        assert call.stdin["cniVersion"] == "1.0.0"  # railyard's default

    multus.delete(pod, [attachment])
    assert netview.nic("net1", pod.netns) is None
    assert_all_returned(host)


def test_multus_delegates_the_rendered_infiniband_nad_of_guide_01(
    railyard: str, make_host, rp_netns, tmp_short: Path, request: pytest.FixtureRequest
) -> None:
    host = make_host(rails=0, ib_rails=1)
    vf = host.vf(1, 0)
    rail = with_guide_pool(host)
    nad_dir = tmp_short / "nads"
    guide = (SEED / "01-ib-pool-and-network.yaml").read_text()
    # the guide's typo (gpu1-net91) fixed; as written it fails before any change
    railyard_apply(
        railyard, host, "-f", "-", "--nad-out", str(nad_dir),
        stdin=guide.replace("gpu1-net91", "gpu1-net11"),
    )  # fmt: skip
    nad = yaml.safe_load((nad_dir / "spiderpool.gpu1-sriov.yaml").read_text())
    assert nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] == (
        "spidernet.io/gpu1sriov"
    )
    attachment = Attachment(
        nad_namespace="spiderpool",
        nad_name=nad["metadata"]["name"],
        config=json.loads(nad["spec"]["config"]),
        resource_device_id=vf.pci,
    )
    pod = Pod(
        namespace="ai-team",
        name="ib-trainer-0",
        uid=str(uuid.uuid4()),
        sandbox_id=uuid.uuid4().hex + uuid.uuid4().hex,
        netns=rp_netns(),
    )
    multus = Multus(
        [host.cni_bin_dir],
        tmp_short / "multus-cache",
        env={**os.environ, **host.env},
    )
    request.addfinalizer(lambda: multus.delete(pod, [attachment], check=False))

    multus.add(pod, [attachment])

    # ib-sriov isolates the RDMA device itself (rdmaIsolation defaults to true)
    (call,) = multus.calls
    assert call.plugin == "ib-sriov"
    address = assert_rail_nic(host, pod.netns, "net1", rail, vf, rdma=True)
    assert_allocated(host, pod.sandbox_id, {"net1": address})

    multus.delete(pod, [attachment])
    assert netview.nic("net1", pod.netns) is None
    assert_all_returned(host)
