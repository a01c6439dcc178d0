# SPDX-License-Identifier: Apache-2.0
"""Warm path, direct mode and the Go chain: ADD / DEL side by side, one lab, one run.

Run as root: ``.venv/bin/python benchmarks/bench_plugins.py [--runs N]``.

Every plugin call is a fresh exec through the same libcni-like runtime
(``railyard_sim.runtime``) on the simulated host (``railyard_sim.lab``, 8 rails
of 8 VFs), in three columns:

- **warm**: the exec'd ``sriov`` is the stdlib-only shim (``cni.agent.shim``),
  forwarding to the lab's ``railyard-agent`` (``railyard_sim.agent``);
- **direct**: the same shim with no agent: it execs the plugin in the venv
  (what a node runs while the agent is down);
- **go**: Debian's ``[host-device (ipam host-local), tuning mtu 4200, sbr]``
  (move + rename, addresses, MTU, source-based routing table; no PF-side
  settings, no detection, no state cache: less work, shown for scale).

Railyard's conflist is ``[sriov (ipam spiderpool -> ipamd over gRPC), tuning
mtu 4200]``. Cases: one NIC ADD/DEL and an 8-NIC pod ADD/DEL with detection
off; an 8-NIC pod ADD with detection on (railyard only, the Go chain has none);
8 pods of 8 NICs started at once, each pod's NICs in sequence as multus runs
them (wall time of the whole burst); VERSION. Median (and min) of N runs, with
the load average before and after. Bytecode for ``cni`` and ``ipamd`` is
compiled first, as ``packaging/install.sh`` does. ``--settle S`` waits S seconds
after each pod's netns is deleted: back to back, the kernel's teardown of the
last pod slows the next case's first move (by ~10 ms on a 2-core host).
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from railyard_sim import agent, daemon  # noqa: E402
from railyard_sim.lab import Lab  # noqa: E402
from railyard_sim.runtime import (  # noqa: E402
    DEBIAN_BIN,
    Attachment,
    PluginError,
    Runtime,
    plugin_bin_dir,
)

REPO = Path(__file__).resolve().parents[1]

ARGS = {"IgnoreUnknown": "true", "K8S_POD_NAMESPACE": "bench", "K8S_POD_NAME": "p"}
RAILS = 8
VFS = 8  # 8 pods x 8 NICs at once need 64 VFs

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


class Bench:
    """One column: a runtime and the conflists it attaches with."""

    def __init__(
        self, lab: Lab, runtime: Runtime, make: Maker, settle: float = 0.0
    ) -> None:
        self.lab = lab
        self.rt = runtime
        self.make = make
        self.settle = settle
        self.n = 0

    def pod(self) -> tuple[str, str]:
        self.n += 1
        cid = f"b{self.n}-{os.getpid()}"
        name = self.lab.netns_name(f"b{self.n}")
        subprocess.run(["ip", "netns", "add", name], check=True)
        return cid, f"/var/run/netns/{name}"

    def drop(self, pod: str) -> None:
        subprocess.run(["ip", "netns", "del", Path(pod).name], check=False)
        # The kernel tears a netns down after its last reference is gone, on a
        # work queue, under the rtnl lock and through RCU grace periods; the
        # next pod's first move waits on both (--settle: let it finish).
        time.sleep(self.settle)

    def nics(self, count: int, vf: int, detect: bool) -> tuple[float, float]:
        """ADD ``count`` NICs (rails 1..count) into one pod in sequence, then DEL."""
        cid, pod = self.pod()
        confs = [self.make(rail, vf, detect) for rail in range(1, count + 1)]
        atts = [
            Attachment(cid, pod, f"net{i + 1}", args=ARGS) for i in range(len(confs))
        ]
        try:
            t0 = time.perf_counter()
            for conf, att in zip(confs, atts, strict=True):
                self.rt.add(conf, att)
            t1 = time.perf_counter()
            for conf, att in zip(confs, atts, strict=True):
                self.rt.delete(conf, att)
            t2 = time.perf_counter()
        finally:
            self.drop(pod)
        return t1 - t0, t2 - t1

    def burst(self, pods: int) -> tuple[float, float]:
        """``pods`` 8-NIC pods at once (pod k on VF k of every rail): wall times."""
        made = [self.pod() for _ in range(pods)]

        def attach(k: int) -> None:
            cid, pod = made[k]
            for rail in range(1, RAILS + 1):
                att = Attachment(cid, pod, f"net{rail}", args=ARGS)
                self.rt.add(self.make(rail, k, False), att)

        def detach(k: int) -> None:
            cid, pod = made[k]
            for rail in range(1, RAILS + 1):
                att = Attachment(cid, pod, f"net{rail}", args=ARGS)
                self.rt.delete(self.make(rail, k, False), att)

        try:
            with ThreadPoolExecutor(pods) as pool:
                t0 = time.perf_counter()
                list(pool.map(attach, range(pods)))
                t1 = time.perf_counter()
                list(pool.map(detach, range(pods)))
                t2 = time.perf_counter()
        finally:
            for _, pod in made:
                self.drop(pod)
        return t1 - t0, t2 - t1


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
    if not samples:
        return "-"
    return f"{statistics.median(samples) * 1000:.0f} ({min(samples) * 1000:.0f})"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def compile_bytecode() -> None:
    for package in ("cni", "ipamd", "sim/railyard_sim"):
        compileall.compile_dir(REPO / package, quiet=1, workers=0)


Case = Callable[[Bench], tuple[float, float]]
# (row label for ADD, row label for DEL or "", the measurement, railyard only)
CASES: list[tuple[str, str, Case, bool]] = [
    ("1 NIC ADD, detection off", "1 NIC DEL", lambda b: b.nics(1, 0, False), False),
    (
        "8-NIC pod ADD, detection off",
        "8-NIC pod DEL",
        lambda b: b.nics(8, 0, False),
        False,
    ),
    ("8-NIC pod ADD, detection on", "", lambda b: b.nics(8, 0, True), True),
    (
        "8 pods x 8 NICs at once, ADD wall",
        "8 pods x 8 NICs at once, DEL wall",
        lambda b: b.burst(8),
        False,
    ),
]


def run(runs: int, columns: list[str], burst_runs: int, settle: float) -> None:
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="rv-bench-") as tmp:
        root = Path(tmp)
        with Lab.up(root / "lab", rails=RAILS, vfs_per_pf=VFS) as lab:
            daemon.start(lab.dir)
            agent.start(lab.dir)
            try:
                daemon.apply_pools(lab.dir, lab.pools_file)
                base = {
                    **daemon.client_env(lab.dir),
                    "RAILYARD_STATE_DIR": str(root / "state"),
                    "RAILYARD_NODE_NAME": "bench",
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                }
                warm_env = base
                warm_bins = agent.shim_bin_dir(root / "warm", lab.dir)
                # The same shims with no agent behind their socket: direct mode.
                direct_bins = agent.shim_bin_dir(
                    root / "direct", lab.dir, socket=root / "no-agent.sock"
                )
                benches = {
                    "warm": Bench(
                        lab,
                        Runtime(
                            [warm_bins, DEBIAN_BIN], env=warm_env, cache_dir=root / "c1"
                        ),
                        lambda rail, vf, det: ours(lab, rail, vf, det),
                        settle,
                    ),
                    "direct": Bench(
                        lab,
                        Runtime(
                            [direct_bins, DEBIAN_BIN], env=base, cache_dir=root / "c2"
                        ),
                        lambda rail, vf, det: ours(lab, rail, vf, det),
                        settle,
                    ),
                    "go": Bench(
                        lab,
                        Runtime([DEBIAN_BIN], env=base, cache_dir=root / "c3"),
                        lambda rail, vf, det: debian(lab, rail, vf, root / "hl"),
                        settle,
                    ),
                }
                benches = {k: v for k, v in benches.items() if k in columns}
                print(
                    f"median (min) of {runs} runs in ms, each plugin call a fresh "
                    f"exec; {os.cpu_count()} CPUs; {settle:g} s settle after each "
                    f"pod's netns is deleted; load average {load_average()}",
                    flush=True,
                )
                print(f"{'case':36}" + "".join(f"{c:>16}" for c in benches), flush=True)
                # First, while the machine is settled: after the burst its load
                # average is ~7 and every start-up takes longer.
                versions: dict[str, list[float]] = {c: [] for c in benches}
                launchers = {
                    "warm": (warm_bins / "sriov", warm_env),
                    "direct": (direct_bins / "sriov", base),
                    "go": (DEBIAN_BIN / "host-device", base),
                }
                today = plugin_bin_dir(lab.dir) / "sriov"
                today_samples: list[float] = []
                for _ in range(max(runs, 10)):
                    for column in benches:
                        binary, env = launchers[column]
                        versions[column].append(version_time(binary, env))
                    today_samples.append(version_time(today, base))
                cells = "".join(f"{ms(versions[c]):>16}" for c in benches)
                print(f"{'VERSION':36}{cells}")
                print(f"{'VERSION, console script (before)':36}{ms(today_samples):>16}")
                for add_label, del_label, case, ours_only in CASES:
                    adds: dict[str, list[float]] = {c: [] for c in benches}
                    dels: dict[str, list[float]] = {c: [] for c in benches}
                    burst = add_label.startswith("8 pods")
                    for column, bench in benches.items():
                        if ours_only and column == "go":
                            continue
                        try:
                            if not burst:  # the burst comes last: caches are warm
                                case(bench)  # warm the page cache
                            for _ in range(burst_runs if burst else runs):
                                a, d = case(bench)
                                adds[column].append(a)
                                dels[column].append(d)
                        except PluginError as exc:
                            print(f"{column} {add_label}: {exc}", file=sys.stderr)
                            print(exc.stderr[-3000:], file=sys.stderr)
                            raise
                    rows = [(add_label, adds)] + (
                        [(del_label, dels)] if del_label else []
                    )
                    for label, samples in rows:
                        cells = "".join(f"{ms(samples[c]):>16}" for c in benches)
                        print(f"{label:36}{cells}", flush=True)
                print(f"load average at the end {load_average()}")
            finally:
                agent.stop(lab.dir)
                daemon.stop(lab.dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--burst-runs",
        type=int,
        default=5,
        help="runs of the 8 pods x 8 NICs case (the longest)",
    )
    parser.add_argument(
        "--columns",
        default="warm,direct,go",
        help="comma-separated subset of warm,direct,go",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="seconds to wait after each pod's netns is deleted, so its teardown "
        "in the kernel does not fall into the next case's first move",
    )
    args = parser.parse_args()
    run(args.runs, args.columns.split(","), args.burst_runs, args.settle)


if __name__ == "__main__":
    main()
