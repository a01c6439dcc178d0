# SPDX-License-Identifier: Apache-2.0
"""The real-kernel tier: tests that run inside Debian's own kernel in a VM.

Every test here is marked ``realkernel`` (``realkernel(vm="exclusive")`` for
the ones needing a VM whose RDMA netns mode is exclusive: the kernel refuses
the switch once a second network namespace exists). On the host, the first
test of a group boots one VM (tests/realkernel/vm.py) that runs pytest on the
whole group inside, as root, over the same checkout and venv; each host test
then reports the outcome its body had inside, with the VM's traceback. Nothing
of a test body or its fixtures runs on the host. A TCG boot costs seconds,
so the tier boots once per group, not once per test.

Where the VM cannot start (not root, QEMU, the kernel or the modules missing)
every test of the tier is skipped and the run ends with a loud line saying
why; ``./dev`` installs and builds what the tier needs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _pytest.reports import TestReport

from tests.realkernel import vm

INSIDE = os.environ.get("RAILYARD_REALKERNEL_INSIDE") == "1"
NODEIDS_ENV = "RAILYARD_REALKERNEL_NODEIDS"
REPORT_ENV = "RAILYARD_REALKERNEL_REPORT"
#: Seconds one group's VM may run (TCG on two busy cores is slow).
VM_TIMEOUT = float(os.environ.get("RAILYARD_REALKERNEL_TIMEOUT", "900"))
ROOT = Path(__file__).resolve().parents[2]


def module_dir() -> Path:
    """Where ./dev (tests/realkernel/modules.sh) put this kernel's modules."""
    release = os.uname().release if INSIDE else vm.kernel_release()
    return vm.CACHE / release


def group_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("realkernel")
    if marker is None:
        return None
    return str(marker.kwargs.get("vm", "shared"))


# ======================================================================= host


@dataclass
class GroupRun:
    """One VM boot that ran one group's tests; its per-test reports."""

    reports: dict[str, list[dict]] = field(default_factory=dict)
    result: vm.VmResult | None = None
    error: str | None = None


class VmSessions:
    def __init__(self) -> None:
        self.runs: dict[str, GroupRun] = {}
        self.skip_reason: str | None = None
        self.checked = False
        self.timings: list[str] = []

    def unavailable(self) -> str | None:
        if not self.checked:
            self.checked = True
            self.skip_reason = vm.unavailable_reason()
            if self.skip_reason is None:
                stamp = module_dir() / "modules.stamp"
                if not stamp.exists():
                    self.skip_reason = (
                        f"{stamp} missing: run ./dev bootstrap (builds netdevsim, rxe)"
                    )
        return self.skip_reason

    def run_group(self, group: str, items: list[pytest.Item]) -> GroupRun:
        if group in self.runs:
            return self.runs[group]
        run = self.runs[group] = GroupRun()
        with tempfile.TemporaryDirectory(prefix=f"railyard-rk-{group}-") as tmp:
            nodeids = Path(tmp) / "nodeids"
            report = Path(tmp) / "report.jsonl"
            nodeids.write_text("".join(f"{i.nodeid}\n" for i in items))
            files = sorted({i.nodeid.split("::")[0] for i in items})
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": "/tmp",
                "PYTHONDONTWRITEBYTECODE": "1",
                "RAILYARD_REALKERNEL_INSIDE": "1",
                NODEIDS_ENV: str(nodeids),
                REPORT_ENV: str(report),
            }
            argv = [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                *files,
            ]
            try:
                run.result = vm.run(
                    argv, shares=[tmp], env=env, cwd=ROOT, timeout=VM_TIMEOUT
                )
            except vm.VmUnavailable as exc:
                run.error = f"the VM did not start: {exc}"
                return run
            for line in report.read_text().splitlines() if report.exists() else []:
                entry = json.loads(line)
                run.reports.setdefault(entry["nodeid"], []).append(entry)
        res = run.result
        self.timings.append(
            f"realkernel VM '{group}': {len(items)} tests, {res.seconds:.0f} s"
            f" ({res.accel}), exit {res.returncode}, load {os.getloadavg()[0]:.1f}"
        )
        if res.timed_out:
            run.error = f"the VM did not finish within {VM_TIMEOUT:g} s"
        return run


SESSIONS = VmSessions()


def _replay(item: pytest.Item, run: GroupRun) -> None:
    """Report on the host what the test's body did inside the VM."""
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    keywords = {k: 1 for k in item.keywords}
    entries = run.reports.get(item.nodeid)
    if not entries:
        res = run.result
        tail = ""
        if res is not None:
            tail = (
                "\n--- pytest inside the VM (tail) ---\n"
                + res.output[-6000:]
                + "\n--- VM console (tail) ---\n"
                + res.console[-3000:]
            )
        why = run.error or "the test did not run inside the VM"
        entries = [
            {"when": "call", "outcome": "failed", "longrepr": why + tail, "duration": 0}
        ]
    for entry in entries:
        longrepr = entry["longrepr"]
        if entry["outcome"] == "skipped" and isinstance(longrepr, list):
            longrepr = tuple(longrepr)
        report = TestReport(
            item.nodeid, item.location, keywords, entry["outcome"], longrepr,
            entry["when"], duration=entry["duration"],
        )  # fmt: skip
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> bool | None:
    group = group_of(item)
    if INSIDE or group is None:
        return None
    if SESSIONS.unavailable() is not None:
        return None  # skipped by the marker added at collection
    members = [i for i in item.session.items if group_of(i) == group]
    _replay(item, SESSIONS.run_group(group, members))
    return True


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    if INSIDE:
        wanted_file = os.environ.get(NODEIDS_ENV)
        if wanted_file:
            wanted = set(Path(wanted_file).read_text().split("\n"))
            dropped = [i for i in items if i.nodeid not in wanted]
            items[:] = [i for i in items if i.nodeid in wanted]
            config.hook.pytest_deselected(items=dropped)
        return
    ours = [i for i in items if group_of(i) is not None]
    if ours and SESSIONS.unavailable() is not None:
        skip = pytest.mark.skip(
            reason=f"REAL-KERNEL TIER SKIPPED: {SESSIONS.skip_reason}"
        )
        for item in ours:
            item.add_marker(skip)


def pytest_terminal_summary(
    terminalreporter, exitstatus: int, config: pytest.Config
) -> None:  # type: ignore[no-untyped-def]
    if INSIDE:
        return
    for line in SESSIONS.timings:
        terminalreporter.write_line(line)
    if SESSIONS.skip_reason is not None:
        terminalreporter.write_line(
            f"!!! REAL-KERNEL TIER SKIPPED: {SESSIONS.skip_reason} !!!",
            red=True,
            bold=True,
        )


# ===================================================================== inside


def pytest_runtest_logreport(report: TestReport) -> None:
    path = os.environ.get(REPORT_ENV)
    if not INSIDE or not path:
        return
    if report.when != "call" and report.outcome == "passed":
        return
    longrepr: object = None
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        longrepr = list(report.longrepr)
    elif report.outcome == "failed":
        sections = "".join(
            f"\n--- {name} ---\n{text}" for name, text in report.sections
        )
        longrepr = report.longreprtext + sections
    entry = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "longrepr": longrepr,
        "duration": report.duration,
    }
    with open(path, "a") as out:
        out.write(json.dumps(entry) + "\n")


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command inside the VM; on failure, the command and its stderr."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} -> {proc.returncode}: {proc.stderr.strip()}"
        )
    return proc


def load_module(name: str, path: Path | None = None) -> None:
    """modprobe ``name`` (its dependencies too), or insmod our build of it."""
    if path is None:
        sh("modprobe", name)
    elif not Path(f"/sys/module/{name}").exists():
        sh("insmod", str(path))


NSIM_BUS = Path("/sys/bus/netdevsim")
DEBUGFS = Path("/sys/kernel/debug")


@dataclass
class NetdevsimPf:
    """A netdevsim device standing in for a PF: a real VF table, no VF netdevs."""

    id: int
    netdev: str
    sysfs: Path


@pytest.fixture(scope="session")
def netdevsim_module() -> None:
    if not INSIDE:
        pytest.skip("runs inside the real-kernel VM only")
    load_module("psample")
    load_module("netdevsim", module_dir() / "netdevsim.ko")
    if not (DEBUGFS / "netdevsim").exists():
        sh("mount", "-t", "debugfs", "debugfs", str(DEBUGFS), check=False)


@pytest.fixture
def make_pf(netdevsim_module: None) -> Iterator[Callable[..., NetdevsimPf]]:
    """Factory of netdevsim PFs with ``vfs`` VFs; every one removed after the test."""
    from railyard_sim.kernel_seams import add_netdevsim_pf, remove_netdevsim_pf

    made: list[int] = []

    def make(vfs: int = 8) -> NetdevsimPf:
        nsim_id, netdev = add_netdevsim_pf(vfs)
        made.append(nsim_id)
        return NetdevsimPf(
            nsim_id, netdev, NSIM_BUS / "devices" / f"netdevsim{nsim_id}"
        )

    try:
        yield make
    finally:
        for nsim_id in made:
            remove_netdevsim_pf(nsim_id)


# ---------------------------------------------------------------------- rxe

STOCK_RXE = None  # Debian's own rdma_rxe: modprobe finds it


def movable_rxe() -> Path:
    """The test-only rxe build whose devices the kernel lets move (modules.sh)."""
    return module_dir() / "rxe-movable" / "rdma_rxe.ko"


def use_rxe(build: Path | None) -> None:
    """Have ``build`` (None: Debian's) be the loaded rdma_rxe: a loaded other
    one is unloaded first (its devices with it)."""
    taint = Path("/sys/module/rdma_rxe/taint")
    if taint.exists():
        # Our build is out of tree: the kernel marks the module "O".
        if ("O" in taint.read_text()) == (build is not None):
            return
        for dev in rdma_links():
            sh("rdma", "link", "del", dev, check=False)
        sh("rmmod", "rdma_rxe")
    if build is None:
        load_module("rdma_rxe")
    else:
        for dependency in ("ib_uverbs", "ip6_udp_tunnel", "udp_tunnel"):
            load_module(dependency)
        sh("insmod", str(build))


def rdma_links(netns: str | None = None) -> list[str]:
    where = ["ip", "netns", "exec", os.path.basename(netns)] if netns else []
    out = sh(*where, "rdma", "-j", "link", "show", check=False).stdout
    return sorted({link["ifname"] for link in json.loads(out or "[]")})


def set_rdma_netns_mode(mode: str) -> None:
    sh("rdma", "system", "set", "netns", mode)


def _run_in(netns: str | None, *argv: str) -> subprocess.CompletedProcess[str]:
    where = ["ip", "netns", "exec", os.path.basename(netns)] if netns else []
    return sh(*where, *argv, check=False)


def netns_paths() -> list[str]:
    run = Path("/run/netns")
    return sorted(str(p) for p in run.iterdir()) if run.exists() else []


@pytest.fixture
def make_rxe() -> Iterator[Callable[..., str]]:
    """Factory of rxe devices ``name`` over a fresh dummy netdev (host netns),
    with the rdma_rxe build asked for; both removed after the test, wherever
    the device ended up."""
    if not INSIDE:
        pytest.skip("runs inside the real-kernel VM only")
    devices: list[str] = []
    netdevs: list[str] = []

    def make(
        name: str, build: Path | None = STOCK_RXE, netdev: str | None = None
    ) -> str:
        use_rxe(build)
        if netdev is None:
            load_module("dummy")
            netdev = f"{name}n"
            sh("ip", "link", "add", netdev, "type", "dummy")
            sh("ip", "link", "set", netdev, "up")
            netdevs.append(netdev)
        sh("rdma", "link", "add", name, "type", "rxe", "netdev", netdev)
        devices.append(name)
        return name

    yield make
    for name in devices:
        for netns in (None, *netns_paths()):
            if _run_in(netns, "rdma", "link", "del", name).returncode == 0:
                break
    for netdev in netdevs:
        sh("ip", "link", "del", netdev, check=False)


# ---------------------------------------------------------------------- labs

#: Seconds ipamd and the agent may take to start: imports run under TCG.
LAB_DAEMON_TIMEOUT = 180


def _lab_factory(root: Path) -> tuple[Callable[..., object], Callable[[], None]]:
    """make(rails, ib_rails, vfs, rdma) -> a started lab, and the teardown."""
    from railyard_sim import agent, daemon
    from railyard_sim.lab import Lab

    labs: list[Lab] = []

    def make(
        rails: int = 1, ib_rails: int = 0, vfs: int = 2, rdma: bool = False
    ) -> Lab:
        seams = frozenset({"vf", "rdma"} if rdma else {"vf"})
        lab_dir = root / f"lab{len(labs)}"
        lab = Lab.up(
            lab_dir, rails=rails, ib_rails=ib_rails, vfs_per_pf=vfs, kernel_seams=seams
        )
        labs.append(lab)
        daemon.start(lab.dir, timeout=LAB_DAEMON_TIMEOUT)
        daemon.apply_pools(lab.dir, lab.pools_file)
        agent.start(lab.dir, timeout=LAB_DAEMON_TIMEOUT)
        return lab

    def teardown() -> None:
        for lab in labs:
            agent.stop(lab.dir)
            lab.down()

    return make, teardown


@pytest.fixture
def make_lab(tmp_path: Path, netdevsim_module: None) -> Iterator[Callable[..., object]]:
    """Factory of simulated hosts whose PFs are netdevsim devices (and whose
    RDMA is the kernel's with ``rdma=True``), with ipamd and the agent up:
    the plugins run warm, as on a node. Everything is removed after the test."""
    make, teardown = _lab_factory(tmp_path)
    try:
        yield make
    finally:
        teardown()


@pytest.fixture(scope="session")
def node_lab(
    tmp_path_factory: pytest.TempPathFactory, netdevsim_module: None
) -> Iterator[object]:
    """One netdevsim-PF lab (a RoCE rail and an IB rail, 3 VFs each) for the
    tests that only attach pods to it and take them off again: its ipamd and
    agent start once (tens of seconds of imports under TCG)."""
    make, teardown = _lab_factory(tmp_path_factory.mktemp("node-lab"))
    try:
        yield make(rails=1, ib_rails=1, vfs=3)
    finally:
        teardown()
