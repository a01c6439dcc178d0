# SPDX-License-Identifier: Apache-2.0
"""The node the client tests run on: installed plugins, a simulated host, ipamd.

- ``Installation``: where ``packaging/install.sh`` (with ``--with-sim``) put the
  CNI launchers, ``ipamd`` and the venv's interpreter (found by the conformance
  suite's ``installation`` fixture: the node's installation from ``./dev test``,
  or a session install). The tests exec only installed code, never the source tree.
- ``SimHost``: a ``railyard_sim.lab.Lab`` (veth "VFs" in this, the root, netns, so that
  every runtime's plugin execs see them) plus an ipamd on a unix socket in the lab
  directory, serving the lab's SpiderIPPools. Its ``cni_bin_dir`` holds the lab's
  launchers, run by the installed interpreter (the installed plugins with the
  simulated host's deps injected, ``railyard_sim.launchers``); ``env`` is what a
  plugin process needs besides (``RAILYARD_STATE_DIR``, ``RAILYARD_IPAMD_SOCKET``).

Imports: standard library, and ``railyard_sim.lab`` for building the lab (test
infrastructure; it is not the code under test).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from railyard_sim import agent as agent_sim
from railyard_sim import launchers
from railyard_sim.lab import Lab, RailSpec, VfSpec

from . import netview

PLUGINS = ("sriov", "ib-sriov", "rdma", "railyard-ipam")


class HostError(RuntimeError):
    """The simulated node could not be set up; the message says what failed."""


@dataclass(frozen=True)
class Installation:
    """The installed CNI launchers, ``ipamd`` and ``railyard-agent``."""

    cni_bin_dir: Path
    ipamd: str

    def missing(self) -> list[str]:
        return [p for p in PLUGINS if not os.access(self.cni_bin_dir / p, os.X_OK)]

    @property
    def python(self) -> str:
        """The installed venv's interpreter (beside its ``ipamd`` script)."""
        return str(Path(self.ipamd).parent / "python")


def wait_for(
    pred: Callable[[], object], timeout: float, what: str, step: float = 0.05
) -> None:
    """Poll ``pred()`` until true; HostError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise HostError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


class Ipamd:
    """``ipamd serve`` on ``<dir>/ipamd.sock`` with SQLite in ``<dir>/ipam.db``."""

    def __init__(self, exe: str, workdir: Path) -> None:
        self.exe = exe
        self.dir = workdir
        self.socket = workdir / "ipamd.sock"
        self.log = workdir / "ipamd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.exe,
                    "serve",
                    "--db",
                    f"sqlite:///{self.dir}/ipam.db",
                    "--listen",
                    self.address,
                ],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise HostError(f"ipamd exited: {self.log.read_text()[-2000:]}")
            # gRPC creates the socket when it listens; an admin call per poll
            # would cost a Python start each (slow on a loaded 2-core CI box)
            return self.socket.exists()

        try:
            wait_for(ready, 60, "ipamd to create its socket", step=0.02)
        except HostError as exc:
            raise HostError(f"{exc}; log: {self.log.read_text()[-2000:]}") from None

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """An admin command against this daemon (``ipamd GROUP CMD ARGS``)."""
        return subprocess.run(
            [self.exe, *args, "--socket", str(self.socket)],
            capture_output=True,
            text=True,
            check=False,
        )

    def check(self, *args: str) -> str:
        proc = self.cli(*args)
        if proc.returncode != 0:
            raise HostError(f"ipamd {' '.join(args)}: {proc.stderr or proc.stdout}")
        return proc.stdout

    def allocations(self) -> list[dict[str, Any]]:
        """Every allocation the daemon holds (``ipamd alloc list --json``)."""
        data = json.loads(self.check("alloc", "list", "--json") or "[]")
        return list(data)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Agent:
    """The installed agent serving a lab (``railyard_sim.agent``, the production
    server with the lab's deps) on ``<dir>/agent/agent.sock``: the warm path."""

    def __init__(self, python: str, lab_dir: Path, workdir: Path) -> None:
        self.python = python
        self.lab_dir = lab_dir
        self.socket = workdir / "agent" / "agent.sock"
        self.log = workdir / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.python,
                    "-m",
                    "railyard_sim.agent",
                    "--lab",
                    str(self.lab_dir),
                    "--socket",
                    str(self.socket),
                ],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise HostError(
                    f"railyard-agent exited: {self.log.read_text()[-2000:]}"
                )
            return self.socket.exists()

        wait_for(ready, 60, "railyard-agent to create its socket", step=0.02)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)  # its workers finish first
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class SimHost:
    """A lab + ipamd; build with ``SimHost.up(...)`` and always ``down()``."""

    def __init__(
        self,
        install: Installation,
        workdir: Path,
        lab: Lab,
        ipamd: Ipamd,
        agent: Agent | None = None,
    ) -> None:
        self.install = install
        self.dir = workdir
        self.lab = lab
        self.ipamd = ipamd
        self.agent = agent
        self.state_dir = workdir / "state"

    @classmethod
    def up(
        cls,
        install: Installation,
        rails: int = 1,
        vfs_per_pf: int = 1,
        ib_rails: int = 0,
        warm: bool = False,
    ) -> SimHost:
        """``warm``: also run the installed agent, so the shims forward to it;
        otherwise they find no agent and run each plugin directly."""
        # A short path: a unix socket path must fit in 108 bytes.
        workdir = Path(tempfile.mkdtemp(prefix="rp-", dir="/tmp"))
        lab: Lab | None = None
        ipamd: Ipamd | None = None
        agent: Agent | None = None
        try:
            lab = Lab.up(
                workdir / "lab", rails=rails, vfs_per_pf=vfs_per_pf, ib_rails=ib_rails
            )
            ipamd = Ipamd(install.ipamd, workdir)
            ipamd.start()
            ipamd.check("pool", "apply", "-f", str(lab.pools_file))
            if warm:
                agent = Agent(install.python, lab.dir, workdir)
                agent.start()
        except BaseException:
            if agent is not None:
                agent.stop()
            if ipamd is not None:
                ipamd.stop()
            if lab is not None:
                lab.down()
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        # The lab's CNI bin dir runs the installed code, not this checkout's:
        # warm, shims forwarding to the installed agent (their direct mode is
        # the launcher); otherwise the lab's launchers themselves.
        if agent is not None:
            agent_sim.shim_bin_dir(
                lab.bin_dir, lab.dir, socket=agent.socket, python=install.python
            )
        else:
            launchers.write(lab.bin_dir, lab.dir, python=install.python)
        host = cls(install, workdir, lab, ipamd, agent)
        host.state_dir.mkdir()
        return host

    def down(self) -> None:
        try:
            if self.agent is not None:
                self.agent.stop()
        finally:
            try:
                self.ipamd.stop()
            finally:
                self.lab.down()
                shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ views

    @property
    def cni_bin_dir(self) -> Path:
        """Where our plugins are for a runtime on this host: the lab's launchers."""
        return self.lab.bin_dir

    @property
    def cni_path(self) -> str:
        """CNI_PATH of this node: our launchers first, then Debian's Go plugins."""
        return f"{self.cni_bin_dir}:/usr/lib/cni"

    @property
    def env(self) -> dict[str, str]:
        """What a plugin process must see to work on this simulated host."""
        return {
            "RAILYARD_STATE_DIR": str(self.state_dir),
            "RAILYARD_IPAMD_SOCKET": str(self.ipamd.socket),
        }

    def rail(self, number: int) -> RailSpec:
        return self.lab.rail(number)

    def vf(self, rail: int, index: int = 0) -> VfSpec:
        return self.lab.rail(rail).vfs[index]

    def all_vfs(self) -> Iterator[tuple[RailSpec, VfSpec]]:
        return self.lab.vfs()

    def vf_in_host(self, vf: VfSpec) -> bool:
        """The VF's netdev is back in the host netns under its original name."""
        return netview.nic(vf.netdev) is not None

    def recording(self) -> dict[str, Any]:
        """The simulated PF/RDMA state (``<lab>/recording.json``), read as a file."""
        return dict(json.loads((self.lab.dir / "recording.json").read_text()))

    def vf_record(self, rail: RailSpec, vf: VfSpec) -> dict[str, Any]:
        """The PF-side VF settings (what ``ip link show <pf>`` lists for it)."""
        return dict(self.recording()["pfs"][rail.pf_netdev]["vfs"][str(vf.index)])

    def rdma_netns(self, vf: VfSpec) -> tuple[int, int] | None:
        """(st_dev, st_ino) of the pod netns holding the VF's RDMA device; None
        when it is in the host (also when the recorded netns is gone: the kernel
        returns the device to the host then)."""
        where = self.recording()["rdma"][vf.rdma].get("netns")
        if not where:
            return None
        ident = (int(where["dev"]), int(where["ino"]))
        try:
            return ident if netns_identity(where["path"]) == ident else None
        except OSError:
            return None

    def allocations_of(self, container_id: str) -> list[dict[str, Any]]:
        return [
            a for a in self.ipamd.allocations() if a.get("containerID") == container_id
        ]

    def leftovers(self) -> list[str]:
        """Everything not back where the lab put it: VFs, RDMA devices, addresses."""
        out = []
        for _rail, vf in self.all_vfs():
            if not self.vf_in_host(vf):
                out.append(f"VF {vf.pci} ({vf.netdev}) not in the host netns")
            if self.rdma_netns(vf) is not None:
                out.append(f"RDMA device {vf.rdma} of {vf.pci} still in a pod netns")
        out += [f"allocation left: {a}" for a in self.ipamd.allocations()]
        return out


def netns_identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino
