# SPDX-License-Identifier: Apache-2.0
"""Pod churn: N pods of K rail NICs created and deleted continuously, warm and Go.

Run as root: ``.venv/bin/python benchmarks/bench_churn.py [--duration 60]``.

What a node sees under 100 % pod churn (OpenShift's perf-scale team found
SR-IOV pod readiness degrading at 80 pods per node, RTNL contention while VFs
are configured): ``--pods`` pods (default 32), each with ``--nics`` rail NICs
(default 2), go through netns created, every NIC ADDed in sequence (as multus
runs them), every NIC DELeted, netns deleted, again and again, ``--concurrency``
pods at a time (default 8), for ``--duration`` seconds (default 60) per column,
on the 8-rail simulated host (``benchlab``: warm, direct, go). A cycle still
running at the end finishes; none starts after it.

Per column: pods attached per second (pod ADDs that succeeded / the phase's
wall time), pod ADD and DEL latency (all of a pod's NICs) p50 / p99 / max,
errors (a failed ADD is DELeted as a runtime would), and what the node holds
afterwards (``benchlab.leftovers``: a pod netns, a VF not back or holding an
address, a record, an allocation), which must be nothing. ``--rounds R``
repeats the columns R times, in alternating order; the statistics pool every
round's cycles.

Pod slot s (one per concurrent pod) owns VF s of its rails, pod rails spread
over the 8 PFs: slot s takes rails ``s*K .. s*K+K-1`` (mod 8), so no two pods
in flight share a VF and the per-PF locks are contended as on a node.
"""

from __future__ import annotations

import argparse
import math
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from benchlab import RAILS, BenchLab, Column, attachment, bench_lab, leftovers
from benchlab import load_average as load_average_now

from railyard_sim.runtime import PluginError

DEFAULTS = {"pods": 32, "nics": 2, "concurrency": 8, "duration": 60.0}


def percentile(samples: list[float], q: float) -> float:
    """The ``q``-th percentile by nearest rank (a sample that happened: with
    100 cycles, p99 is the second slowest, never an interpolation)."""
    if not samples:
        raise ValueError("no samples")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is not in (0, 100]")
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


@dataclass(frozen=True, slots=True)
class Summary:
    """p50 / p99 / max of one latency, in seconds, over ``n`` samples."""

    n: int
    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, samples: list[float]) -> Summary | None:
        if not samples:
            return None
        return cls(
            len(samples), percentile(samples, 50), percentile(samples, 99), max(samples)
        )

    def render(self) -> str:
        return " / ".join(f"{x * 1000:.0f}" for x in (self.p50, self.p99, self.max))


@dataclass(slots=True)
class Tally:
    """What a column's churn produced (every round pooled)."""

    adds: list[float] = field(default_factory=list)  # succeeded pod ADDs
    dels: list[float] = field(default_factory=list)  # succeeded pod DELs
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0  # seconds of churn, summed over rounds
    left: list[str] = field(default_factory=list)

    def merge(self, other: Tally) -> None:
        self.adds += other.adds
        self.dels += other.dels
        self.errors += other.errors
        self.wall += other.wall
        self.left += other.left

    @property
    def pods_per_second(self) -> float:
        return len(self.adds) / self.wall if self.wall else 0.0

    def row(self, name: str) -> str:
        add, dele = Summary.of(self.adds), Summary.of(self.dels)
        return (
            f"{name:8}{len(self.adds):>7}{self.pods_per_second:>9.2f}"
            f"{add.render() if add else '-':>20}{dele.render() if dele else '-':>20}"
            f"{len(self.errors):>8}{len(self.left):>8}"
        )


HEADER = (
    f"{'column':8}{'pods':>7}{'pods/s':>9}{'ADD p50/p99/max ms':>20}"
    f"{'DEL p50/p99/max ms':>20}{'errors':>8}{'left':>8}"
)


def slot_vfs(slot: int, nics: int) -> list[tuple[int, int]]:
    """(rail, VF index) of each NIC of the pod in ``slot``."""
    return [((slot * nics + j) % RAILS + 1, slot) for j in range(nics)]


class Churn:
    """One column's churn: ``concurrency`` threads cycling ``pods`` pods."""

    def __init__(
        self,
        bench: BenchLab,
        column: Column,
        pods: int,
        nics: int,
        concurrency: int,
        netns_prefix: str,
    ) -> None:
        self.bench = bench
        self.column = column
        self.nics = nics
        self.concurrency = concurrency
        self.prefix = netns_prefix
        self.free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for pod in range(pods):
            self.free.put(pod)
        self.cycles = 0
        self.lock = threading.Lock()
        self.tally = Tally()

    def run(self, duration: float) -> Tally:
        end = time.monotonic() + duration
        t0 = time.perf_counter()
        threads = [
            threading.Thread(target=self._slot, args=(s, end), name=f"slot{s}")
            for s in range(self.concurrency)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.tally.wall = time.perf_counter() - t0
        used = [vf for s in range(self.concurrency) for vf in slot_vfs(s, self.nics)]
        self.tally.left = leftovers(self.bench, self.prefix, used)
        return self.tally

    def _slot(self, slot: int, end: float) -> None:
        vfs = slot_vfs(slot, self.nics)
        while time.monotonic() < end:
            pod = self.free.get()
            try:
                self._cycle(pod, vfs)
            finally:
                self.free.put(pod)

    def _cycle(self, pod: int, vfs: list[tuple[int, int]]) -> None:
        with self.lock:
            self.cycles += 1
            n = self.cycles
        rt, make = self.column.runtime, self.column.make
        cid = f"churn-p{pod}-{n}"
        name = f"{self.prefix}{pod}"
        netns = f"/var/run/netns/{name}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        confs = [make(rail, vf, False) for rail, vf in vfs]
        atts = [attachment(cid, netns, i + 1) for i in range(len(confs))]
        try:
            t0 = time.perf_counter()
            try:
                for conf, att in zip(confs, atts, strict=True):
                    rt.add(conf, att)
            except PluginError as exc:
                self._error(f"ADD {cid}: {exc}")
            else:
                self._sample(self.tally.adds, time.perf_counter() - t0)
            t1 = time.perf_counter()
            failed = False
            # A runtime DELs every NIC of the pod, whatever ADD did.
            for conf, att in reversed(list(zip(confs, atts, strict=True))):
                try:
                    rt.delete(conf, att)
                except PluginError as exc:
                    failed = True
                    self._error(f"DEL {cid} {att.ifname}: {exc}")
            if not failed:
                self._sample(self.tally.dels, time.perf_counter() - t1)
        finally:
            subprocess.run(["ip", "netns", "del", name], check=False)

    def _sample(self, into: list[float], seconds: float) -> None:
        with self.lock:
            into.append(seconds)

    def _error(self, text: str) -> None:
        with self.lock:
            self.tally.errors.append(text)


def run(
    columns: list[str],
    pods: int,
    nics: int,
    concurrency: int,
    duration: float,
    rounds: int,
) -> dict[str, Tally]:
    if not 1 <= nics <= RAILS:
        raise SystemExit(f"--nics must be 1..{RAILS}")
    if not 1 <= concurrency <= pods:
        raise SystemExit("--concurrency must be 1..--pods")
    totals = {c: Tally() for c in columns}
    with bench_lab(columns, vfs=max(8, concurrency), prefix="rv-churn-") as bench:
        prefix = bench.lab.netns_name("churn-")
        print(
            f"churn: {pods} pods x {nics} NICs, {concurrency} at a time, "
            f"{duration:g} s per column and round, {rounds} round(s); "
            f"{os.cpu_count()} CPUs; load average {load_average_now()}",
            flush=True,
        )
        for r in range(rounds):
            order = columns if r % 2 == 0 else columns[::-1]
            for name in order:
                churn = Churn(
                    bench, bench.columns[name], pods, nics, concurrency, prefix
                )
                tally = churn.run(duration)
                print(
                    f"round {r + 1} {tally.row(name)}  load {load_average_now()}",
                    flush=True,
                )
                for line in tally.errors[:5] + tally.left[:10]:
                    print(f"    {line}", file=sys.stderr)
                totals[name].merge(tally)
        print(HEADER)
        for name in columns:
            print(totals[name].row(name))
        print(f"load average at the end {load_average_now()}")
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=DEFAULTS["pods"])
    parser.add_argument("--nics", type=int, default=DEFAULTS["nics"])
    parser.add_argument("--concurrency", type=int, default=DEFAULTS["concurrency"])
    parser.add_argument(
        "--duration",
        type=float,
        default=DEFAULTS["duration"],
        help="seconds of churn per column and round",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--columns", default="warm,go", help="comma-separated subset of warm,direct,go"
    )
    args = parser.parse_args(argv)
    totals = run(
        args.columns.split(","),
        args.pods,
        args.nics,
        args.concurrency,
        args.duration,
        args.rounds,
    )
    clean = all(not t.errors and not t.left for t in totals.values())
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
