# SPDX-License-Identifier: Apache-2.0
"""cnitool (the CNI project's reference client, libcni 1.1.2 from Debian's source)
drives the installed plugins on the simulated host.

cnitool passes its environment to plugins (libcni appends CNI_* to
os.Environ()), so the simulated host is selected by exporting the
RAILYARD_* variables; CAP_ARGS becomes ``runtimeConfig`` for declared
capabilities only; its container ID is "cnitool-" + 20 hex of sha512(netns).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from . import netview
from .assertions import (
    assert_all_returned,
    assert_allocated,
    assert_rail_nic,
)
from .commands import run

pytestmark = pytest.mark.integration


def cnitool_container_id(netns: str) -> str:
    return ("cnitool-" + hashlib.sha512(netns.encode()).hexdigest())[: 8 + 20]


def cnitool_env(host, net_dir: Path, ifname: str, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        **host.env,
        "NETCONFPATH": str(net_dir),
        "CNI_PATH": host.cni_path,
        "CNI_IFNAME": ifname,
        **extra,
    }


@contextmanager
def deleted_at_exit(
    cnitool: str, net: str, netns: str, env: dict[str, str]
) -> Iterator[None]:
    """A last DEL whatever happened: a failed test leaves no VF, address or
    libcni result cache (/var/lib/cni/results, not relocatable in cnitool)."""
    try:
        yield
    finally:
        run([cnitool, "del", net, netns], env=env, check=False)


def test_cnitool_add_check_del_sriov_with_rdma_chained_from_cap_args(
    cnitool: str, make_host, rp_netns, tmp_short: Path
) -> None:
    host = make_host(rails=1, vfs_per_pf=2)
    rail, vf = host.rail(1), host.vf(1, 1)
    netns = rp_netns()
    mac = "02:00:5e:10:00:01"
    net_dir = tmp_short / "net.d"
    net_dir.mkdir()
    (net_dir / "rail1.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "rp-rail1",
                "plugins": [
                    {
                        "type": "sriov",
                        "capabilities": {"deviceID": True, "mac": True},
                        "ipam": {
                            "type": "railyard",
                            "default_ipv4_ippool": [rail.pool_v4],
                            "socket": str(host.ipamd.socket),
                        },
                    },
                    {"type": "rdma", "capabilities": {"deviceID": True}},
                ],
            }
        )
    )
    env = cnitool_env(
        host, net_dir, "net1", CAP_ARGS=json.dumps({"deviceID": vf.pci, "mac": mac})
    )
    cid = cnitool_container_id(netns)

    with deleted_at_exit(cnitool, "rp-rail1", netns, env):
        added = json.loads(run([cnitool, "add", "rp-rail1", netns], env=env).stdout)
        address = assert_rail_nic(host, netns, "net1", rail, vf, rdma=True)
        assert netview.nic("net1", netns).mac == mac
        assert [i["address"] for i in added["ips"]] == [address]
        pod_side = [i for i in added["interfaces"] if i.get("sandbox")]
        assert [(i["name"], i["sandbox"], i["mac"]) for i in pod_side] == [
            ("net1", netns, mac)
        ]
        assert_allocated(host, cid, {"net1": address})

        run([cnitool, "check", "rp-rail1", netns], env=env)

        run([cnitool, "del", "rp-rail1", netns], env=env)
        assert netview.nic("net1", netns) is None
        assert_all_returned(host)


def test_cnitool_runs_spiderpool_rendered_sriov_rdma_tuning_conflist(
    cnitool: str, make_host, rp_netns, tmp_short: Path
) -> None:
    host = make_host(rails=1, vfs_per_pf=1)
    rail, vf = host.rail(1), host.vf(1, 0)
    netns = rp_netns()
    # Spiderpool's SpiderMultusConfig renders this, byte for byte; Multus then
    # injects the device plugin's VF as deviceID/pciBusID into every plugin.
    rendered = {
        "cniVersion": "0.3.1",
        "name": "gpu1-sriov",
        "plugins": [
            {
                "vlan": 0,
                "min_tx_rate": 0,
                "max_tx_rate": 0,
                "type": "sriov",
                "ipam": {"type": "spiderpool", "default_ipv4_ippool": ["gpu1-net11"]},
            },
            {"type": "rdma"},
            {"type": "tuning", "mtu": 4200},
        ],
    }
    for plugin in rendered["plugins"]:
        plugin.update(deviceID=vf.pci, pciBusID=vf.pci)
    net_dir = tmp_short / "net.d"
    net_dir.mkdir()
    (net_dir / "gpu1-sriov.conflist").write_text(json.dumps(rendered))
    env = cnitool_env(
        host,
        net_dir,
        "net1",
        CNI_ARGS="IgnoreUnknown=true;K8S_POD_NAMESPACE=rp;K8S_POD_NAME=gpu-pod-0",
    )
    cid = cnitool_container_id(netns)

    with deleted_at_exit(cnitool, "gpu1-sriov", netns, env):
        run([cnitool, "add", "gpu1-sriov", netns], env=env)
        address = assert_rail_nic(host, netns, "net1", rail, vf, mtu=4200, rdma=True)
        assert_allocated(host, cid, {"net1": address})

        # 0.3.1 has no CHECK (libcni refuses it before exec'ing anything)
        run([cnitool, "del", "gpu1-sriov", netns], env=env)
        assert netview.nic("net1", netns) is None
        assert_all_returned(host)
