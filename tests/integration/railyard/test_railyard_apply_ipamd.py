# SPDX-License-Identifier: Apache-2.0
"""``railyard apply`` as a user runs it, against a real ipamd on a unix socket.

The guide's 01 fails naming gpu1-net91 and leaves ipamd and the conf dir as
they were; fixed, it applies; a pool ipamd refuses (it overlaps a pool ipamd
already has: a rule only the server knows) writes no network.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from railyard.ipamd_link import GrpcIpamd

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
SEED = REPO / "tests" / "unit" / "railyard" / "seed"


class Node:
    """A temp dir with an ipamd (in-memory store) and a CNI conf dir."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.socket = workdir / "ipamd.sock"
        self.conf_dir = workdir / "net.d"
        self.log = workdir / "ipamd.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ipamd", "serve", "--db", "memory",
                 "--listen", f"unix://{self.socket}"],
                stdout=log,
                stderr=log,
                cwd=REPO,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ipamd did not start: {self.log.read_text()}")
            time.sleep(0.02)

    def railyard(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "railyard", *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=REPO,
            env={"PATH": "/usr/bin:/bin", "RAILYARD_IPAMD_SOCKET": str(self.socket)},
            timeout=120,
        )

    def apply(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return self.railyard(
            "apply", "--cni-conf-dir", str(self.conf_dir), *args, stdin=stdin
        )

    def pools(self) -> set[str]:
        with GrpcIpamd(str(self.socket)) as ipamd:
            return ipamd.pool_names()

    def conflists(self) -> list[str]:
        if not self.conf_dir.exists():
            return []
        return sorted(p.name for p in self.conf_dir.glob("*.conflist"))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def node() -> Iterator[Node]:
    workdir = Path(tempfile.mkdtemp(prefix="ry-apply-"))
    made = None
    try:
        made = Node(workdir)
        yield made
    finally:
        if made is not None:
            made.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_guide_01_fails_naming_gpu1_net91_then_applies_once_fixed(node: Node) -> None:
    guide = (SEED / "01-ib-pool-and-network.yaml").read_text()

    failed = node.apply("-f", "-", stdin=guide)
    assert failed.returncode == 1
    assert failed.stderr == (
        "error: <stdin> document 2: SpiderMultusConfig spiderpool/gpu1-sriov: pool "
        "gpu1-net91 does not exist (neither in this file nor in ipamd); did you "
        "mean gpu1-net11?\n"
    )
    assert node.pools() == set()  # the file's pool was not applied either
    assert node.conflists() == []

    fixed = node.apply("-f", "-", stdin=guide.replace("gpu1-net91", "gpu1-net11"))
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.splitlines() == [
        "spiderippool/gpu1-net11 created",
        f"network spiderpool/gpu1-sriov: {node.conf_dir}/gpu1-sriov.conflist created",
    ]
    assert node.pools() == {"gpu1-net11"}
    assert node.conflists() == ["gpu1-sriov.conflist"]


def test_mtu_network_uses_the_pool_ipamd_already_has(node: Node) -> None:
    first = node.apply("-f", str(SEED / "02-roce-pool-and-network.yaml"))
    assert first.returncode == 0, first.stderr
    # 05 names gpu1-net11 without defining it: ipamd has it now
    dry = node.apply("-f", str(SEED / "05-mtu-network.yaml"), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.endswith("gpu1-sriov.conflist configured (dry run)\n")
    assert '"mtu": 8000' not in (node.conf_dir / "gpu1-sriov.conflist").read_text()
    real = node.apply("-f", str(SEED / "05-mtu-network.yaml"))
    assert real.returncode == 0, real.stderr
    assert '"mtu": 8000' in (node.conf_dir / "gpu1-sriov.conflist").read_text()

    listed = node.railyard("get", "networks", "--cni-conf-dir", str(node.conf_dir))
    assert listed.stdout.splitlines()[1].split()[:2] == ["gpu1-sriov", "sriov"]


def test_pool_ipamd_refuses_writes_no_network(node: Node) -> None:
    assert node.apply("-f", str(SEED / "02-roce-pool-and-network.yaml")).returncode == 0
    (node.conf_dir / "gpu1-sriov.conflist").unlink()
    clash = """
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: gpu1-net11-bis}
spec: {subnet: 172.16.0.0/16, ips: [172.16.11.100-172.16.11.250]}
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderMultusConfig
metadata: {name: bis, namespace: spiderpool}
spec:
  cniType: sriov
  sriov: {resourceName: spidernet.io/bis, ippools: {ipv4: [gpu1-net11-bis]}}
"""
    failed = node.apply("-f", "-", stdin=clash)
    assert failed.returncode == 1
    assert "overlaps with IPPool gpu1-net11" in failed.stderr
    assert node.pools() == {"gpu1-net11"}
    assert node.conflists() == []


def test_unreachable_ipamd_is_one_clear_error(node: Node) -> None:
    node.stop()
    failed = node.apply("-f", str(SEED / "05-mtu-network.yaml"), "--timeout", "2")
    assert failed.returncode == 1
    assert failed.stderr.startswith(f"error: ipamd at {node.socket} is not reachable")
    assert "Traceback" not in failed.stderr
