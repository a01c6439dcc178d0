# SPDX-License-Identifier: Apache-2.0
"""NetlinkRdmaOps on this real kernel, which has no RDMA: a clear NotSupported.

CI's kernel has no ib_core, so opening a NETLINK_RDMA socket fails with
EPROTONOSUPPORT. The plugins turn NotSupported into a CNI error; here we pin
that the adapter raises it (with the operator-facing message) rather than a
raw OSError, for every operation.
"""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys

import pytest

from cni.kernel import NotSupported
from cni.kernel.nldev import NETLINK_RDMA
from cni.kernel.rdma import NO_RDMA_MSG, NetlinkRdmaOps

pytestmark = pytest.mark.kernel


def _host_has_rdma_netlink() -> bool:
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_RDMA).close()
    except OSError as exc:
        return exc.errno not in (errno.EPROTONOSUPPORT, errno.EAFNOSUPPORT)
    return True


needs_no_rdma = pytest.mark.skipif(
    _host_has_rdma_netlink(), reason="this host has RDMA netlink"
)


@needs_no_rdma
def test_netns_mode_without_rdma_says_ib_core_is_missing() -> None:
    with pytest.raises(NotSupported) as info:
        NetlinkRdmaOps().netns_mode()
    assert str(info.value) == NO_RDMA_MSG
    assert "ib_core" in str(info.value)
    assert info.value.errno == errno.EPROTONOSUPPORT


@needs_no_rdma
def test_devices_and_move_without_rdma_raise_not_supported() -> None:
    ops = NetlinkRdmaOps()
    with pytest.raises(NotSupported):
        ops.devices()
    with pytest.raises(NotSupported):
        ops.move("mlx5_0", None)


@needs_no_rdma
def test_device_list_inside_a_netns_without_rdma_returns_to_the_host_netns(
    make_netns,
) -> None:
    ns = make_netns("ri")
    before = subprocess.run(
        ["readlink", "/proc/self/ns/net"], capture_output=True, text=True
    ).stdout
    code = (
        "import os\n"
        "from cni.kernel import NotSupported\n"
        "from cni.kernel.rdma import NetlinkRdmaOps\n"
        "before = os.readlink('/proc/self/ns/net')\n"
        "try:\n"
        f"    NetlinkRdmaOps().devices({ns!r})\n"
        "except NotSupported:\n"
        "    pass\n"
        "print(before == os.readlink('/proc/self/ns/net'), before)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == "True"
    assert out[1] == before.strip()


@needs_no_rdma
def test_rdma_binary_on_this_host_reports_no_rdma_without_a_traceback(
    tmp_path,
) -> None:
    """The real host: a CNI error on stdout, code 100."""
    binary = f"{sys.prefix}/bin/railyard-rdma"
    conf = {
        "cniVersion": "1.0.0",
        "name": "rdma-net",
        "type": "rdma",
        "deviceID": "0000:3b:00.2",
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "net1", "mac": "02:00:00:00:00:01", "sandbox": "/x"}
            ],
        },
    }
    env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "ri1",
        "CNI_NETNS": "/x",
        "CNI_IFNAME": "net1",
        "CNI_PATH": "/usr/lib/cni",
        "RAILYARD_STATE_DIR": str(tmp_path),
        "PATH": "/usr/sbin:/usr/bin",
    }
    proc = subprocess.run(
        [binary],
        input=json.dumps(conf),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["code"] == 100
    assert out["msg"] == "RDMA is not available on this host"
    assert out["details"] == NO_RDMA_MSG
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "rdma").exists()  # no state for a failed ADD
