# SPDX-License-Identifier: Apache-2.0
"""The host our plugins need, set up black-box through the installed commands.

Standard library + pytest. ``railyard-sim up --lab DIR`` (the installed
command, not the source tree) builds the simulated host and starts its ipamd;
this module only reads what any operator can read: ``<lab>/lab.json`` (rails,
VF PCI addresses, netdev names, pools), the socket ``<lab>/ipamd.sock``, and
``ipamd alloc list`` for evidence that an address was released. Our plugins
are exec'd from ``<lab>/cni-bin``: the launchers ``railyard-sim up`` wrote,
run by the installed interpreter (the installed plugins with the simulated
host's dependencies injected).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conformance import netns
from conformance.runner import Runner, RuntimeConf
from conformance.subjects import Attachment, Subject, best_effort_del, load_case

ROCE_RAILS, IB_RAILS, VFS_PER_PF = 1, 1, 8


class RailyardHost:
    """One lab (+ its ipamd) shared by our subjects; VFs are lent per attachment."""

    def __init__(self, installation: Any, root: Path) -> None:
        self.sim = installation.tool("railyard-sim")
        self.ipamd = installation.tool("ipamd")
        self.lab = root / "lab"
        try:
            proc = subprocess.run(
                [
                    self.sim,
                    "up",
                    "--lab",
                    str(self.lab),
                    "--rails",
                    str(ROCE_RAILS),
                    "--ib-rails",
                    str(IB_RAILS),
                    "--vfs-per-pf",
                    str(VFS_PER_PF),
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if proc.returncode != 0:
                pytest.fail(f"railyard-sim up failed:\n{proc.stderr[-2000:]}")
            self.manifest = json.loads((self.lab / "lab.json").read_text())
        except BaseException:
            # Whatever `up` managed to build must not outlive the session.
            self.down()
            raise
        self.socket = str(self.lab / "ipamd.sock")
        # Free VFs per rail kind; a VF whose stand-in was lost is never reused.
        self.free: dict[str, list[dict[str, Any]]] = {"roce": [], "ib": []}
        self.rail_of: dict[str, dict[str, Any]] = {}
        for rail in self.manifest["rails"]:
            for vf in rail["vfs"]:
                self.free[rail["kind"]].append(vf)
                self.rail_of[vf["pci"]] = rail

    @property
    def bin_dir(self) -> Path:
        """The lab's CNI bin dir: our plugins running on this simulated host."""
        return self.lab / "cni-bin"

    def subject(self, name: str, workdir: Path) -> Subject:
        cls = {"sriov": Sriov, "ib-sriov": IbSriov, "rdma": RdmaChained}[name]
        return cls(self, [self.bin_dir], workdir)

    def env(self, workdir: Path) -> dict[str, str]:
        return {
            "RAILYARD_STATE_DIR": str(workdir / "state"),
            "RAILYARD_IPAMD_SOCKET": self.socket,
            "RAILYARD_NODE_NAME": "rc-node",
        }

    @contextmanager
    def vf(self, kind: str) -> Iterator[dict[str, Any]]:
        if not self.free[kind]:
            pytest.fail(
                f"no free {kind} VF left in the lab (all lost to earlier tests)"
            )
        vf = self.free[kind].pop(0)
        try:
            yield vf
        finally:
            # Reusable only if the stand-in is back in the host under its own name.
            if vf["netdev"] in netns.links():
                self.free[kind].append(vf)

    def allocations(self, container_id: str) -> list[Any]:
        proc = subprocess.run(
            [
                self.ipamd,
                "alloc",
                "list",
                "--socket",
                self.socket,
                "--container-id",
                container_id,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout or "[]")
        return data.get("allocations", data) if isinstance(data, dict) else data

    def down(self) -> None:
        """``railyard-sim down``; if it cannot run or leaves anything, remove_lab.

        The lab's id is read first: ``down`` deletes ``lab.json`` even when it
        fails half-way, and the fallback needs the id to find what is left.
        """
        lab_id = lab_id_of(self.lab)
        try:
            proc = subprocess.run(
                [self.sim, "down", "--lab", str(self.lab)],
                capture_output=True,
                timeout=120,
                check=False,
            )
            ok = proc.returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False  # the tool is gone (a partial install) or hangs
        if not ok or leftovers(self.lab, lab_id):
            remove_lab(self.lab, lab_id)


# ------------------------------------------------------------ direct cleanup
# What `railyard-sim down` removes, done without it: the documented names
# (netns and links start with rs<lab_id>, ipamd serves <lab>/ipamd.sock).

LAB_PREFIX = "rs"


def lab_id_of(lab: Path) -> str | None:
    try:
        return str(json.loads((lab / "lab.json").read_text())["lab_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _ip_names(*args: str) -> list[str]:
    proc = subprocess.run(
        ["ip", "-j", *args], capture_output=True, text=True, check=False
    )
    try:
        data = json.loads(proc.stdout) if proc.stdout.strip() else []
    except ValueError:
        return []
    return [str(e.get("name") or e.get("ifname")) for e in data]


def ipamd_pids(lab: Path) -> list[int]:
    """Live ``ipamd serve`` processes listening on the lab's socket."""
    sock = str((lab / "ipamd.sock").absolute())
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "serve" in args and any(a in (sock, f"unix://{sock}") for a in args):
            pids.append(int(entry.name))
    return pids


def leftovers(lab: Path, lab_id: str | None) -> list[str]:
    """The lab's netns, links and ipamd processes still present."""
    left = [f"ipamd pid {pid}" for pid in ipamd_pids(lab)]
    if lab_id:
        prefix = LAB_PREFIX + lab_id
        left += [n for n in _ip_names("netns", "list") if n.startswith(prefix)]
        left += [n for n in _ip_names("link", "show") if n.startswith(prefix)]
    return left


def remove_lab(lab: Path, lab_id: str | None, timeout: float = 10.0) -> None:
    """Kill the lab's ipamd, delete its netns and links, remove its directory."""
    pids = ipamd_pids(lab)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout / 2
        while time.monotonic() < deadline and ipamd_pids(lab):
            time.sleep(0.05)
        if not ipamd_pids(lab):
            break
    # An exited daemon stays a zombie until init reaps it (milliseconds).
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and any(
        Path(f"/proc/{p}").exists() for p in pids
    ):
        time.sleep(0.02)
    if lab_id:
        prefix = LAB_PREFIX + lab_id
        for ns in [n for n in _ip_names("netns", "list") if n.startswith(prefix)]:
            # Veths first: a peer dies with them at once, a netns only later.
            for dev in _ip_names("-n", ns, "link", "show", "type", "veth"):
                netns.ip("link", "del", "dev", dev, netns=ns, check=False)
            netns.ip("netns", "del", ns, check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            host = [n for n in _ip_names("link", "show") if n.startswith(prefix)]
            if not host:
                break
            for dev in host:
                netns.ip("link", "del", "dev", dev, check=False)
            time.sleep(0.02)
    shutil.rmtree(lab, ignore_errors=True)


class _OurSubject(Subject):
    kind = "roce"

    def __init__(self, host: RailyardHost, bin_dirs: list[Path], workdir: Path) -> None:
        super().__init__(bin_dirs, workdir)
        self.host = host

    def runner(self, **kw: Any) -> Runner:
        return Runner(
            self.bin_dirs,
            self.workdir / "cache",
            extra_env=self.host.env(self.workdir),
            **kw,
        )

    case = ""  # cases/<case>.json

    @contextmanager
    def attachment(self, version: str | None = None) -> Iterator[Attachment]:
        version = version or self.highest_version()
        with self.host.vf(self.kind) as vf:
            rail = self.host.rail_of[vf["pci"]]
            pod = netns.add_netns("p")
            conf = load_case(
                self.case,
                CNI_VERSION=version,
                DEVICE_ID=vf["pci"],
                POOL_V4=rail["pool_v4"],
                IPAMD_SOCKET=self.host.socket,
            )
            rt = RuntimeConf(netns.unique("c"), self.ifname, netns.netns_path(pod))
            att = Attachment(self, self.runner(), conf, rt, pod, {"vf": vf})
            try:
                yield att
            finally:
                if netns.netns_exists(pod):
                    best_effort_del(att)
                    # A VF still inside (a failed DEL) goes back before the netns dies.
                    self._rescue(att)
                    netns.del_netns(pod)

    def _rescue(self, att: Attachment) -> None:
        if netns.netns_exists(att.netns_name) and att.rt.ifname in netns.links(
            att.netns_name
        ):
            netns.ip(
                "link",
                "set",
                att.rt.ifname,
                "netns",
                str(os.getpid()),
                netns=att.netns_name,
                check=False,
            )

    def vanish_netns(self, att: Attachment) -> None:
        # A real VF returns to the host under its pod name when the netns dies; a
        # veth stand-in would be destroyed, so move it out first (team convention).
        self._rescue(att)
        netns.del_netns(att.netns_name)

    def assert_released(self, att: Attachment) -> None:
        vf = att.private["vf"]
        host_links = netns.links()
        assert vf["netdev"] in host_links, (
            f"VF {vf['pci']} not restored as {vf['netdev']} in the host"
        )
        leases = self.host.allocations(att.rt.container_id)
        assert not leases, f"ipamd still holds {leases} for {att.rt.container_id}"

    def without_backend(self, conf: dict[str, Any]) -> dict[str, Any] | None:
        conf = json.loads(json.dumps(conf))
        if "ipam" not in conf:
            return None  # rdma has no IPAM of its own
        conf["ipam"]["socket"] = str(self.workdir / "no-ipamd-here.sock")
        return conf

    def assert_gc_released(self, att: Attachment) -> None:
        leases = self.host.allocations(att.rt.container_id)
        assert not leases, f"GC left {leases} for {att.rt.container_id}"


class Sriov(_OurSubject):
    name = plugin_type = "sriov"
    case = "sriov.conflist"


class IbSriov(_OurSubject):
    name = plugin_type = "ib-sriov"
    kind = "ib"
    case = "ib-sriov.conflist"


class RdmaChained(_OurSubject):
    """rdma as Multus runs it: chained after sriov, deviceID injected in both."""

    name = plugin_type = "rdma"
    case = "sriov-rdma.conflist"

    def supported_versions(self) -> list[str]:
        # The chain can only speak what both plugins speak.
        if self._versions is None:
            runner = self.runner()
            mine = runner.version("rdma")["supportedVersions"]
            sriov = set(runner.version("sriov")["supportedVersions"])
            self._versions = [v for v in mine if v in sriov]
        return self._versions
