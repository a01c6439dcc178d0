# SPDX-License-Identifier: Apache-2.0
"""containerd 1.6's ``ctr run --cni`` runs a task on our ``sriov``.

ctr sets the network up in the task's netns (/proc/<pid>/ns/net) and tears it
down only after the task - and so the netns - is gone, with an empty
CNI_NETNS. A real VF then sits in the host under its pod name (the kernel
moves physical devices out of a dying netns); the test does that to the
stand-in right before the task dies. DEL must still release the address and
restore the VF (name included) from what ADD recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from . import netview
from .assertions import assert_all_returned, assert_allocated, assert_rail_nic
from .host import wait_for
from .runtimes import IMAGE

pytestmark = pytest.mark.integration


def test_ctr_del_after_the_netns_is_gone_releases_the_address_and_restores_the_vf(
    make_host, containerd, tmp_short: Path
) -> None:
    host = make_host(rails=1)
    rail, vf = host.rail(1), host.vf(1, 0)
    conf_dir = tmp_short / "net.d"
    conf_dir.mkdir()
    (conf_dir / "10-rail1.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "rp-ctr-rail1",
                "plugins": [
                    {
                        "type": "sriov",
                        "deviceID": vf.pci,
                        "ipam": {
                            "type": "spiderpool",
                            "default_ipv4_ippool": [rail.pool_v4],
                        },
                    }
                ],
            }
        )
    )
    name = f"rp{uuid.uuid4().hex[:8]}"
    cmd = containerd.ctr_cni_cmd(
        conf_dir,
        host.cni_bin_dir,
        "run",
        "--rm",
        "--cni",
        IMAGE,
        name,
        "sleep",
        "120",
    )
    # ctr's environment reaches the plugins (test_client_environment.py)
    ctr = subprocess.Popen(
        cmd,
        env={**os.environ, **host.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # ctr starts the task only after its CNI setup succeeded, exits if not
        def started() -> bool:
            task = containerd.task(name)
            return ctr.poll() is not None or (task is not None and task[1] == "RUNNING")

        wait_for(started, 60, "ctr to start the task with its network")
        assert ctr.poll() is None, ctr.communicate()
        task = containerd.task(name)
        assert task is not None
        netns = f"/proc/{task[0]}/ns/net"
        address = assert_rail_nic(host, netns, "eth0", rail, vf)
        assert_allocated(host, f"{containerd.namespace}-{name}", {"eth0": address})

        # as "eth0", or as dev<ifindex> when the host has an eth0 (it has here)
        in_host = netview.return_to_host(netns, "eth0")
        # ...and the kernel's sysfs follows the name (the lab's tree is static)
        host.lab.tree.set_netdev(vf.pci, in_host)
        containerd.ctr("task", "kill", "--signal", "SIGKILL", name)
        out, err = ctr.communicate(timeout=60)
    finally:
        if ctr.poll() is None:
            containerd.ctr("task", "kill", "--signal", "SIGKILL", name, check=False)
            ctr.communicate(timeout=60)
    # a failed DEL would make ctr print "ctr: <plugin error>" and exit 1
    assert "ctr:" not in err, err
    assert netview.nic(in_host) is None, f"{in_host} was not renamed back"
    assert_all_returned(host)
