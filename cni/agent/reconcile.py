# SPDX-License-Identifier: Apache-2.0
"""The node agent's reconcile: finish what a DEL that never came left behind.

In the clusters Railyard is for, nobody calls CNI GC on our plugins (multus
sends GC only to the cluster's primary network; containerd has no GC yet).
So a DEL that never comes (a runtime that lost its sandbox, a crash between
the netns teardown and DEL) would leave a VF under a pod's name or in a dead
namespace, its RDMA device and GUID, and the address in ipamd, forever. The
agent looks for such attachments itself, at start-up and then every
``interval`` seconds (+-``jitter``, so the nodes of a cluster do not report
to ipamd in step).

An attachment record is **gone** when

- ``netns-gone``: the network namespace ADD moved the VF into no longer
  exists (the runtime deleted it without a DEL);
- ``vf-in-host``: the VF is back in the host under its pod interface name
  (recognised by the ifindex or pod MAC ADD recorded, never by name alone),
  as the kernel returns a physical device from a destroyed namespace
  (sriov-cni #126), while its recorded netns path names another namespace;
- ``sandbox-gone``: the container runtime, asked over the CRI
  (``cni.agent.cri``: containerd or CRI-O), answered in full and does not
  know the record's sandbox, the record is a Kubernetes pod's (it names the
  pod: only those were made through the CRI), and it is older than
  ``sandbox_min_age`` (a runtime registers a sandbox only after its whole
  CNI chain ran). Without a runtime socket this criterion is off and the
  two above still hold.

Finishing one is the runtime's DEL, exactly: each plugin's own DEL
(``cni.skel.run_plugin`` over the agent's plugin table, the record deciding
what to restore: VF home with name, MAC, MTU and PF settings, RDMA device
home, GUID restored, address released through the IPAM that allocated, record
removed), in the order a runtime deletes a chain (rdma, then the VF). Never
one whose ADD or DEL is in flight: the pass takes the attachment's locks
without waiting (the per-PF lock of ib-sriov first, then the per-PCI one, as
the plugins do), skips it when a plugin holds one, judges it again under
them, and lends them to the DEL it runs (``cni.state.locks.lent``), so no ADD
can slip in between. A pass repairs at most ``max_repairs`` attachments; the
rest wait for the next one. One log line per repair, its counts in
``cni.agent.reconcile_metrics``.

Then the node tells ipamd which attachments it holds (``ReconcileNode``):
ipamd releases this node's allocations no record explains once they are older
than its grace period (an allocation made after the records were listed is
younger). Only the networks this node has held VF records of are vouched
for: allocations made through ``railyard-ipam`` for another main plugin have
no record here and are never reported against. An unreachable ipamd is tried
again at the next pass.

A pass runs in a process of its own, forked for it: what a DEL leaves in a
process (netns, channels) never reaches the next pass, and a pass killed at
any point (SIGKILL, its deadline) leaves records that the next pass's DEL
finishes, since every DEL step is idempotent and driven by the record.
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
import signal
import socket
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from cni.agent.cri import AUTO, CriSandboxes, CriUnavailable
from cni.agent.reconcile_metrics import STATS_FILE, ReconcileStats, replace_file
from cni.attach.teardown import is_the_vf
from cni.errors import CniError
from cni.record.store import Attachment, AttachmentRecords
from cni.skel import run_plugin
from cni.state.cache import StateCache
from cni.state.locks import FileLock, Locks, lent

if TYPE_CHECKING:
    from cni.agent.server import PluginTable
    from cni.kernel import LinkInfo

log = logging.getLogger(__name__)

NETNS_GONE = "netns-gone"
VF_IN_HOST = "vf-in-host"
SANDBOX_GONE = "sandbox-gone"
NODE_NAME_ENV = "RAILYARD_NODE_NAME"
#: The networks this node has held VF records of (never shrinks).
NETWORKS_FILE = Path("reconcile") / "networks.json"
CNI_VERSION = "1.0.0"
#: The netconf name of an rdma DEL whose record names no network.
RDMA_UNNAMED = "railyard-reconcile"
#: Seconds a pass waits for ipamd to take the node's account.
IPAMD_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class ReconcileSettings:
    interval: float = 60.0
    jitter: float = 0.2  # fraction of the interval, either way
    max_repairs: int = 16  # per pass
    sandbox_min_age: float = 120.0
    #: A pass still running after this long is killed; the next one finishes.
    pass_timeout: float = 600.0
    ipamd_endpoints: tuple[str, ...] = ()  # () : the plugins' default ipamd
    report_to_ipamd: bool = True


@dataclass(frozen=True, slots=True)
class Finding:
    """Why an attachment is gone."""

    what: str
    why: str


@dataclass(slots=True)
class PassReport:
    repaired: list[tuple[str, str, str]] = field(default_factory=list)
    failed: list[tuple[str, str, str]] = field(default_factory=list)
    busy: list[tuple[str, str]] = field(default_factory=list)
    deferred: int = 0  # left for the next pass (bound reached)
    ipamd_released: int = 0


# ------------------------------------------------------------------ judging


class Judge:
    """Reads the node (netns, host links, the runtime) and says which
    attachment is gone; changes nothing."""

    def __init__(
        self,
        netns_exists: Callable[[str], bool],
        host_link: Callable[[str], LinkInfo | None],
        sandboxes: frozenset[str] | None,
        sandbox_min_age: float,
    ) -> None:
        self._netns_exists = netns_exists
        self._host_link = host_link
        self._sandboxes = sandboxes
        self._min_age = sandbox_min_age

    def verdict(self, att: Attachment, age: float) -> Finding | None:
        netns = _netns_of(att)
        if netns and not self._netns_exists(netns):
            return Finding(NETNS_GONE, f"its netns {netns} is gone")
        vf = att.vf
        if vf is not None and not vf.stage.vf_home and (vf.pod_mac or vf.host_ifindex):
            link = self._host_link(vf.ifname)
            if link is not None and is_the_vf(link, vf, False):
                return Finding(
                    VF_IN_HOST,
                    f"VF {vf.pci} is back in the host as {vf.ifname} "
                    f"(ifindex {link.index}, {link.mac})",
                )
        if (
            self._sandboxes is not None
            and vf is not None
            # Only a Kubernetes pod's attachment (K8S_POD_NAME in CNI_ARGS)
            # was made through the CRI runtime: a podman container's is not in
            # its list even when containerd runs on the same host.
            and vf.pod_name
            and att.container_id not in self._sandboxes
            and age >= self._min_age
        ):
            return Finding(SANDBOX_GONE, "the runtime no longer knows its sandbox")
        return None


def _netns_of(att: Attachment) -> str:
    if att.vf is not None:
        return att.vf.netns
    if att.rdma is not None:
        return att.rdma.netns
    return ""


def _pci_of(att: Attachment) -> str:
    for part in (att.vf, att.ib):
        if part is not None and part.pci:
            return part.pci
    if att.rdma is not None:
        return att.rdma.device_id or f"rdma-{att.rdma.device}"
    return ""


def lock_keys(att: Attachment) -> list[str]:
    """The locks the plugins take for this attachment, in their order."""
    keys: list[str] = []
    ib_sriov = att.vf_plugin == "ib-sriov" or att.ib is not None
    if ib_sriov:
        pf_pci = (att.ib.pf_pci if att.ib else "") or (
            str(att.vf.extra.get("pf_pci") or "") if att.vf else ""
        )
        keys.append(f"ib-pf-{pf_pci or _pci_of(att)}")
    pci = _pci_of(att)
    if pci:
        keys.append(pci)
    if att.rdma is not None and att.rdma.device_id and att.rdma.device_id != pci:
        keys.append(att.rdma.device_id)
    return keys


# ---------------------------------------------------------------- repairing


def del_requests(att: Attachment) -> list[tuple[str, dict[str, object]]]:
    """(CNI type, netconf) of each DEL a runtime would run for this attachment,
    in the runtime's order (a chain is deleted last plugin first)."""
    out: list[tuple[str, dict[str, object]]] = []
    if att.rdma is not None:
        out.append(
            (
                "rdma",
                {
                    "cniVersion": CNI_VERSION,
                    # rdma's DEL names nothing by it; a section written before
                    # sections kept their network still needs a valid netconf.
                    "name": att.rdma.network or _network_of(att, RDMA_UNNAMED),
                    "type": "rdma",
                    "deviceID": att.rdma.device_id,
                },
            )
        )
    vf_plugin = att.vf_plugin or ("ib-sriov" if att.ib is not None else "")
    if vf_plugin:
        network = att.vf.network if att.vf else (att.ib.network if att.ib else "")
        conf: dict[str, object] = {
            "cniVersion": CNI_VERSION,
            "name": network,
            "type": vf_plugin,
            "deviceID": _pci_of(att),
        }
        if att.vf is not None and att.vf.ipam_type:
            # DEL releases through the record's IPAM anyway; named here so a
            # netconf check of the plugin sees the same one.
            conf["ipam"] = {**att.vf.ipam_conf, "type": att.vf.ipam_type}
        out.append((vf_plugin, conf))
    return out


class Reconciler:
    """One node's passes over its attachment records."""

    def __init__(
        self,
        table: PluginTable,
        state_dir: Path,
        env: Mapping[str, str],
        settings: ReconcileSettings = ReconcileSettings(),
        sandboxes: CriSandboxes | None = None,
        netns_exists: Callable[[str], bool] | None = None,
        host_link: Callable[[str], LinkInfo | None] | None = None,
    ) -> None:
        self.table = table
        self.state_dir = Path(state_dir)
        self.env = dict(env)
        self.settings = settings
        self.sandboxes = sandboxes
        self._netns_exists = netns_exists
        self._host_link = host_link

    # -- one pass -------------------------------------------------------

    def run_pass(self) -> PassReport:
        """Judge every record, repair the gone ones (up to the bound), then
        give ipamd the node's account."""
        started, t0 = time.time(), time.monotonic()
        stats_path = self.state_dir / STATS_FILE
        stats = ReconcileStats.load(stats_path)
        report = PassReport()
        judge = Judge(
            self._netns_exists or _real_netns_exists(),
            self._host_link or _real_host_link(),
            self._known_sandboxes(),
            self.settings.sandbox_min_age,
        )
        records = AttachmentRecords(self.state_dir)
        for att in records.all():
            finding = judge.verdict(att, self._age(att, started))
            if finding is None:
                continue
            if len(report.repaired) + len(report.failed) >= self.settings.max_repairs:
                report.deferred += 1
                continue
            self._repair(records, judge, att, finding, report, stats, stats_path)
        if report.deferred:
            log.info(
                "reconcile: %d more gone attachment(s) left for the next pass "
                "(at most %d repairs a pass)",
                report.deferred,
                self.settings.max_repairs,
            )
        if self.settings.report_to_ipamd:
            report.ipamd_released = self._report_to_ipamd(records)
            stats.ipamd_released += report.ipamd_released
        stats.last_pass_timestamp = time.time()
        stats.last_pass_seconds = time.monotonic() - t0
        stats.save(stats_path)
        return report

    def _age(self, att: Attachment, now: float) -> float:
        """Seconds since the attachment's newest record part was written."""
        newest = 0.0
        for directory in (att.vf_plugin, "rdma", "ib-sriov-guid"):
            if not directory:
                continue
            path = StateCache(self.state_dir, directory).path(
                att.container_id, att.ifname
            )
            try:
                newest = max(newest, path.stat().st_mtime)
            except OSError:
                continue
        return now - newest if newest else 0.0

    def _known_sandboxes(self) -> frozenset[str] | None:
        if self.sandboxes is None:
            return None
        try:
            return frozenset(s.id for s in self.sandboxes.list())
        except CriUnavailable as exc:
            # ``auto`` on a host without a CRI runtime: said once at start-up.
            quiet = (
                self.sandboxes.socket_path is None and self.sandboxes.setting == AUTO
            )
            log.log(
                logging.DEBUG if quiet else logging.WARNING,
                "reconcile: judging without the runtime this pass: %s",
                exc,
            )
            return None

    def _repair(
        self,
        records: AttachmentRecords,
        judge: Judge,
        att: Attachment,
        finding: Finding,
        report: PassReport,
        stats: ReconcileStats,
        stats_path: Path,
    ) -> None:
        key = (att.container_id, att.ifname)
        locks = Locks(self.state_dir)
        with ExitStack() as held:
            taken: list[FileLock] = []
            for lock_key in lock_keys(att):
                try:
                    taken.append(held.enter_context(locks.lock(lock_key, timeout=0)))
                except CniError:
                    # An ADD or DEL of this VF is running: never ours to touch.
                    log.debug("reconcile: %s/%s is busy (%s)", *key, lock_key)
                    report.busy.append(key)
                    return
            now = self._reloaded(records, att)
            if now is None:
                return  # a DEL finished it meanwhile
            again = judge.verdict(now, self._age(now, time.time()))
            if again is None:
                return  # alive after all (an ADD of the same attachment ran)
            with lent(*taken):
                errors = [
                    self._run_del(cni_type, conf, now)
                    for cni_type, conf in del_requests(now)
                ]
        errors = [e for e in errors if e]
        what = again.what
        if errors:
            report.failed.append((*key, what))
            stats.failures[what] = stats.failures.get(what, 0) + 1
            log.warning(
                "reconcile: %s/%s (%s): DEL without the runtime failed, retried "
                "next pass: %s",
                *key,
                again.why,
                "; ".join(errors),
            )
        else:
            report.repaired.append((*key, what))
            stats.repairs[what] = stats.repairs.get(what, 0) + 1
            log.info(
                "reconcile: finished %s/%s of network %s (VF %s) as its DEL would: %s",
                *key,
                _network_of(now),
                _pci_of(now) or "-",
                again.why,
            )
        stats.save(stats_path)

    def _reloaded(
        self, records: AttachmentRecords, att: Attachment
    ) -> Attachment | None:
        for fresh in records.all():
            if (fresh.container_id, fresh.ifname) == (att.container_id, att.ifname):
                return fresh
        return None

    def _run_del(
        self, cni_type: str, netconf: Mapping[str, object], att: Attachment
    ) -> str:
        """The plugin's DEL in this process; "" or why it failed."""
        entry = self.table.get(cni_type)
        if entry is None:
            return f"no plugin {cni_type!r} in the agent"
        env = {
            **self.env,
            "CNI_COMMAND": "DEL",
            "CNI_CONTAINERID": att.container_id,
            "CNI_NETNS": "",  # the record says where the VF is
            "CNI_IFNAME": att.ifname,
            "CNI_PATH": self.env.get("CNI_PATH") or "/opt/cni/bin",
            "RAILYARD_STATE_DIR": str(self.state_dir),
        }
        out, err = io.StringIO(), io.StringIO()
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        root.handlers.clear()
        try:
            code = run_plugin(
                entry.funcs,
                entry.about,
                env=env,
                stdin=io.BytesIO(json.dumps(netconf).encode()),
                stdout=cast(IO[str], out),
                stderr=cast(IO[str], err),
                plugin_name=entry.plugin_name,
            )
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        for line in err.getvalue().splitlines():
            log.debug("reconcile: %s DEL: %s", cni_type, line)
        if code == 0:
            return ""
        try:
            doc = json.loads(out.getvalue())
            return f"{cni_type}: {doc.get('msg', '')} ({doc.get('details', '')})"
        except ValueError:
            return f"{cni_type}: exit {code}: {err.getvalue().strip()[-300:]}"

    # -- ipamd ------------------------------------------------------------

    def _report_to_ipamd(self, records: AttachmentRecords) -> int:
        """The node's attachments to ipamd; the addresses it released."""
        from ipamd.client import IpamdCallError, IpamdClient

        held: list[tuple[str, str]] = []
        networks = self._vouched_networks()
        for att in records.all():
            held.append((att.container_id, att.ifname))
            if att.vf is not None and att.vf.network:
                networks.add(att.vf.network)
        self._remember(networks)
        if not networks:
            return 0
        node = self.env.get(NODE_NAME_ENV) or socket.gethostname()
        # The endpoints the spare workers connect to: --ipamd, else the
        # plugins' default (RAILYARD_IPAMD_SOCKET, TLS files from the env).
        ipam: dict[str, object] = {"timeout": IPAMD_TIMEOUT}
        if self.settings.ipamd_endpoints:
            ipam["endpoints"] = list(self.settings.ipamd_endpoints)
        try:
            with IpamdClient.from_config(ipam, self.env) as client:
                reply = client.reconcile_node(node, held, networks)
        except (IpamdCallError, ValueError, OSError) as exc:
            log.warning(
                "reconcile: ipamd did not take node %s's account (tried again "
                "next pass): %s",
                node,
                exc.describe() if isinstance(exc, IpamdCallError) else exc,
            )
            return 0
        for a in reply.released:
            log.info(
                "reconcile: ipamd released %s of %s/%s (container %s %s): no "
                "attachment on node %s explains it",
                a.address or a.ip,
                a.pod_namespace,
                a.pod_name,
                a.container_id,
                a.ifname,
                node,
            )
        return len(reply.released)

    def _vouched_networks(self) -> set[str]:
        try:
            data = json.loads((self.state_dir / NETWORKS_FILE).read_bytes())
        except (OSError, ValueError):
            return set()
        return (
            {n for n in data if isinstance(n, str)} if isinstance(data, list) else set()
        )

    def _remember(self, networks: set[str]) -> None:
        path = self.state_dir / NETWORKS_FILE
        if networks == self._vouched_networks():
            return
        replace_file(path, json.dumps(sorted(networks)))

    # -- the loop -------------------------------------------------------

    def serve_forever(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """A pass at start-up, then one every interval (with jitter), each in
        a forked process bounded by ``pass_timeout``.

        This process never calls gRPC itself (the CRI, ipamd): its passes are
        forked from it, and a process that forks must not hold gRPC's threads
        (fork support is off in the agent). The first pass names the runtime.
        """
        log.info(
            "reconcile: every %gs (+-%d%%), at most %d repairs a pass",
            self.settings.interval,
            round(self.settings.jitter * 100),
            self.settings.max_repairs,
        )
        first = True
        while not should_stop():
            self._forked_pass(first)
            first = False
            spread = self.settings.interval * self.settings.jitter
            pause = self.settings.interval + random.uniform(-spread, spread)
            deadline = time.monotonic() + max(pause, 0.05)
            while not should_stop() and time.monotonic() < deadline:
                time.sleep(min(0.1, max(deadline - time.monotonic(), 0)))

    def _runtime_name(self) -> str:
        if self.sandboxes is None:
            return "none (netns and VF checks only)"
        try:
            return f"{self.sandboxes.runtime()} over {self.sandboxes.socket_path}"
        except CriUnavailable as exc:
            return f"not answering yet ({exc})"

    def _forked_pass(self, first: bool = False) -> None:
        pid = os.fork()
        if pid == 0:
            status = 70
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                if first:
                    log.info("reconcile: container runtime %s", self._runtime_name())
                self.run_pass()
                status = 0
            except BaseException as exc:  # noqa: BLE001 - the child never returns
                log.error("reconcile pass failed: %s", exc)
            finally:
                os._exit(status)
        deadline = time.monotonic() + self.settings.pass_timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if status:
                    log.warning("reconcile pass %d ended with status %#x", pid, status)
                return
            if time.monotonic() > deadline:
                log.error(
                    "reconcile pass %d still running after %gs: killed; the next "
                    "pass finishes what it started",
                    pid,
                    self.settings.pass_timeout,
                )
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.02)


def _network_of(att: Attachment, unknown: str = "-") -> str:
    for part in (att.vf, att.rdma, att.ib):
        if part is not None and part.network:
            return part.network
    return unknown


def _real_netns_exists() -> Callable[[str], bool]:
    from cni.kernel.netns import Namespaces

    return Namespaces().exists


def _real_host_link() -> Callable[[str], LinkInfo | None]:
    from cni.kernel.links import NetlinkLinks

    links = NetlinkLinks()
    return lambda name: links.find(name)


def reconciler_process(
    table: PluginTable,
    state_dir: Path,
    settings: ReconcileSettings,
    cri_socket: str,
    env: Mapping[str, str] | None = None,
) -> Callable[[], None]:
    """The agent's child running the passes until the agent ends."""

    # Built now, in the agent before it forks: the CRI's message classes (and
    # protobuf with them) are then imported once, not by the reconcile child.
    sandboxes = CriSandboxes(cri_socket) if cri_socket else None

    def run() -> None:
        Reconciler(
            table, state_dir, os.environ if env is None else env, settings, sandboxes
        ).serve_forever()

    return run
