# SPDX-License-Identifier: Apache-2.0
"""Warm path, direct mode and the Go chain: ADD / DEL side by side, one lab, one run.

Run as root: ``.venv/bin/python benchmarks/bench_plugins.py [--runs N]``.

The lab, its daemons and the three columns (warm, direct, go) are
``benchlab``'s (shared with ``bench_churn.py``). Cases: one NIC ADD/DEL and an
8-NIC pod ADD/DEL with detection off; an 8-NIC pod ADD with detection on
(railyard only, the Go chain has none); 8 pods of 8 NICs started at once, each
pod's NICs in sequence as multus runs them (wall time of the whole burst);
VERSION. Median (and min) of N runs, with the load average before and after.
``--settle S`` waits S seconds after each pod's netns is deleted: back to
back, the kernel's teardown of the last pod slows the next case's first move
(by ~10 ms on a 2-core host).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchlab import (
    RAILS,
    Maker,
    attachment,
    bench_lab,
    load_average,
    ms,
    version_time,
)

from railyard_sim.lab import Lab
from railyard_sim.runtime import PluginError, Runtime, plugin_bin_dir

VFS = 8  # 8 pods x 8 NICs at once need 64 VFs


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
        atts = [attachment(cid, pod, i + 1) for i in range(len(confs))]
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
                att = attachment(cid, pod, rail)
                self.rt.add(self.make(rail, k, False), att)

        def detach(k: int) -> None:
            cid, pod = made[k]
            for rail in range(1, RAILS + 1):
                att = attachment(cid, pod, rail)
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
    with bench_lab(columns, VFS) as bl:
        lab = bl.lab
        benches = {
            name: Bench(lab, col.runtime, col.make, settle)
            for name, col in bl.columns.items()
        }
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
        today = plugin_bin_dir(lab.dir) / "sriov"
        today_samples: list[float] = []
        for _ in range(max(runs, 10)):
            for column in benches:
                col = bl.columns[column]
                versions[column].append(version_time(col.launcher, col.env))
            today_samples.append(version_time(today, bl.env))
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
            rows = [(add_label, adds)] + ([(del_label, dels)] if del_label else [])
            for label, samples in rows:
                cells = "".join(f"{ms(samples[c]):>16}" for c in benches)
                print(f"{label:36}{cells}", flush=True)
        print(f"load average at the end {load_average()}")


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
