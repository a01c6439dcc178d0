# SPDX-License-Identifier: Apache-2.0
"""What the plugin benchmarks share: the lab, its daemons and the three columns.

``bench_plugins.py`` (one pod at a time, a burst) and ``bench_churn.py`` (pods
created and deleted continuously) measure the same three ways of attaching a
VF on the 8-rail simulated host (``railyard_sim.lab``), every plugin call a
fresh exec through the same libcni-like runtime (``railyard_sim.runtime``):

- **warm**: the exec'd ``sriov`` is the stdlib-only shim (``cni.agent.shim``),
  forwarding to the lab's ``railyard-agent`` (``railyard_sim.agent``);
- **direct**: the same shim with no agent: it execs the plugin in the venv
  (what a node runs while the agent is down);
- **go**: Debian's ``[host-device (ipam host-local), tuning mtu 4200, sbr]``
  (move + rename, addresses, MTU, source-based routing table; no PF-side
  settings, no detection, no state cache: less work, shown for scale).

Railyard's conflist is ``[sriov (ipam spiderpool -> ipamd over gRPC), tuning
mtu 4200]``. ``bench_lab`` brings it all up and down around a ``with`` block.
"""

from __future__ import annotations

import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from railyard_sim import agent, daemon  # noqa: E402
from railyard_sim.lab import Lab, ip_json, link_names, netns_names  # noqa: E402
from railyard_sim.runtime import DEBIAN_BIN, Attachment, Runtime  # noqa: E402

ARGS = {"IgnoreUnknown": "true", "K8S_POD_NAMESPACE": "bench", "K8S_POD_NAME": "p"}
RAILS = 8
COLUMNS = ("warm", "direct", "go")

Conf = dict[str, Any]
#: (rail, vf index, detection) -> conflist
Maker = Callable[[int, int, bool], Conf]


def ours(lab: Lab, rail: int, vf: int, detect: bool) -> Conf:
    r = lab.rail(rail)
    pci = r.vfs[vf].pci
    sriov = {
        "type": "sriov",
        "vlan": 0,
        "min_tx_rate": 0,
        "max_tx_rate": 0,
        "deviceID": pci,
        "pciBusID": pci,
        "detectIPConflict": detect,
        "detectGateway": detect,
        "ipam": {"type": "spiderpool", "default_ipv4_ippool": [r.pool_v4]},
    }
    return {
        "cniVersion": "1.0.0",
        "name": f"gpu{rail}-sriov",
        "plugins": [sriov, {"type": "tuning", "mtu": 4200}],
    }


def debian(lab: Lab, rail: int, vf: int, data_dir: Path) -> Conf:
    r = lab.rail(rail)
    first, last = r.range_v4.split("-")
    hd = {
        "type": "host-device",
        "device": r.vfs[vf].netdev,
        "ipam": {
            "type": "host-local",
            "dataDir": str(data_dir),
            "ranges": [
                [
                    {
                        "subnet": r.subnet_v4,
                        "rangeStart": first,
                        "rangeEnd": last,
                        "gateway": r.gateway_v4,
                    }
                ]
            ],
            "routes": [{"dst": "0.0.0.0/0"}],
        },
    }
    return {
        "cniVersion": "1.0.0",
        "name": f"gpu{rail}-debian",
        "plugins": [hd, {"type": "tuning", "mtu": 4200}, {"type": "sbr"}],
    }


@dataclass(frozen=True, slots=True)
class Column:
    """One way of attaching: its runtime, conflists and VERSION launcher."""

    name: str
    runtime: Runtime
    make: Maker
    launcher: Path  # the binary VERSION is timed on
    env: dict[str, str]


@dataclass(frozen=True, slots=True)
class BenchLab:
    """The lab with ipamd and the agent running, and the columns asked for."""

    lab: Lab
    root: Path  # the benchmark's temp dir
    columns: dict[str, Column]
    env: dict[str, str]  # what every plugin is run with (ipamd, state dir)

    @property
    def state_dir(self) -> Path:
        """Railyard's attachment records (RAILYARD_STATE_DIR)."""
        return self.root / "state"

    @property
    def host_local_dir(self) -> Path:
        """The Go chain's host-local allocations (its ``dataDir``)."""
        return self.root / "hl"


def compile_bytecode() -> None:
    """Bytecode for ``cni``, ``ipamd`` and the simulator, as install.sh does."""
    for package in ("cni", "ipamd", "sim/railyard_sim"):
        compileall.compile_dir(REPO / package, quiet=1, workers=0)


@contextmanager
def bench_lab(
    columns: list[str],
    vfs: int,
    prefix: str = "rv-bench-",
    spares: int = 2,
    metrics_listen: str = "",
) -> Iterator[BenchLab]:
    """An 8-rail lab of ``vfs`` VFs per PF, ipamd with the lab's pools, the
    lab's agent (its /metrics on ``metrics_listen`` when given), and a runtime
    per column; all of it gone after the block."""
    unknown = set(columns) - set(COLUMNS)
    if unknown:
        raise ValueError(f"unknown columns {sorted(unknown)}; pick from {COLUMNS}")
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        root = Path(tmp)
        with Lab.up(root / "lab", rails=RAILS, vfs_per_pf=vfs) as lab:
            daemon.start(lab.dir)
            agent.start(lab.dir, spares=spares, metrics_listen=metrics_listen)
            try:
                daemon.apply_pools(lab.dir, lab.pools_file)
                base = {
                    **daemon.client_env(lab.dir),
                    "RAILYARD_STATE_DIR": str(root / "state"),
                    "RAILYARD_NODE_NAME": "bench",
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                }
                warm_bins = agent.shim_bin_dir(root / "warm", lab.dir)
                # The same shims with no agent behind their socket: direct mode.
                direct_bins = agent.shim_bin_dir(
                    root / "direct", lab.dir, socket=root / "no-agent.sock"
                )

                def railyard(rail: int, vf: int, detect: bool) -> Conf:
                    return ours(lab, rail, vf, detect)

                def go(rail: int, vf: int, detect: bool) -> Conf:
                    return debian(lab, rail, vf, root / "hl")

                made = {
                    "warm": lambda: Column(
                        "warm",
                        Runtime(
                            [warm_bins, DEBIAN_BIN], env=base, cache_dir=root / "c1"
                        ),
                        railyard,
                        warm_bins / "sriov",
                        base,
                    ),
                    "direct": lambda: Column(
                        "direct",
                        Runtime(
                            [direct_bins, DEBIAN_BIN], env=base, cache_dir=root / "c2"
                        ),
                        railyard,
                        direct_bins / "sriov",
                        base,
                    ),
                    "go": lambda: Column(
                        "go",
                        Runtime([DEBIAN_BIN], env=base, cache_dir=root / "c3"),
                        go,
                        DEBIAN_BIN / "host-device",
                        base,
                    ),
                }
                yield BenchLab(lab, root, {c: made[c]() for c in columns}, base)
            finally:
                agent.stop(lab.dir)
                daemon.stop(lab.dir)


def version_time(binary: Path, env: dict[str, str]) -> float:
    """Wall time of one VERSION call: interpreter / binary start-up cost."""
    t0 = time.perf_counter()
    subprocess.run(
        [str(binary)],
        input=b"{}",
        env={**env, "CNI_COMMAND": "VERSION"},
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - t0


def ms(samples: list[float]) -> str:
    """``median (min)`` in ms."""
    if not samples:
        return "-"
    return f"{statistics.median(samples) * 1000:.0f} ({min(samples) * 1000:.0f})"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def attachment(cid: str, netns: str, nic: int) -> Attachment:
    """The ``nic``-th rail NIC (``net<nic>``) of a pod, as multus names it."""
    return Attachment(cid, netns, f"net{nic}", args=ARGS)


# ------------------------------------------------------------- leftovers


def leftovers(
    bench: BenchLab, netns_prefix: str, vfs: list[tuple[int, int]]
) -> list[str]:
    """What the benchmark's pods left on the node, one line each ([] when
    clean): a pod netns, a VF not back in the host or holding an address, a
    Railyard record, an address still allocated in ipamd or host-local."""
    lab = bench.lab
    found = [f"netns {n}" for n in netns_names() if n.startswith(netns_prefix)]
    host_links = set(link_names())
    for rail, index in vfs:
        netdev = lab.rail(rail).vfs[index].netdev
        if netdev not in host_links:
            found.append(f"VF {netdev} (rail {rail}) is not in the host")
            continue
        for link in ip_json(["addr", "show", "dev", netdev, "scope", "global"]):
            infos = link.get("addr_info", [])
            found += [
                f"address {a['local']}/{a['prefixlen']} on {netdev}"
                for a in (infos if isinstance(infos, list) else [])
            ]
    found += record_leftovers(bench.state_dir)
    found += host_local_leftovers(bench.host_local_dir)
    found += [f"ipamd allocation {a}" for a in ipamd_allocations(bench)]
    return found


def record_leftovers(state_dir: Path) -> list[str]:
    """Attachment records under ``state_dir`` (lock files stay by design)."""
    if not state_dir.is_dir():
        return []
    return [
        f"record {p.relative_to(state_dir)}"
        for p in sorted(state_dir.rglob("*.json"))
        if "locks" not in p.relative_to(state_dir).parts
    ]


def host_local_leftovers(data_dir: Path) -> list[str]:
    """host-local's lease files: one per address, named by it (its
    ``last_reserved_ip.N`` and ``lock`` files stay by design)."""
    if not data_dir.is_dir():
        return []
    return [
        f"host-local lease {p.parent.name}/{p.name}"
        for p in sorted(data_dir.glob("*/*"))
        if not p.name.startswith("last_reserved_ip") and p.name != "lock"
    ]


def ipamd_allocations(bench: BenchLab) -> list[str]:
    """ipamd's allocations, as ``ipamd alloc list --json`` shows them."""
    proc = subprocess.run(
        [daemon.ipamd_command(), "alloc", "list", "--json"],
        env={**os.environ, **bench.env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    doc = json.loads(proc.stdout or "[]")
    rows = doc.get("allocations", []) if isinstance(doc, dict) else doc
    return [f"{row.get('ip')} ({row.get('containerID')})" for row in rows]
