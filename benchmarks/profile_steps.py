# SPDX-License-Identifier: Apache-2.0
"""Where a warm ADD and DEL spend their time, from the agent's own /metrics.

Run as root: ``.venv/bin/python benchmarks/profile_steps.py [--cycles 30]``.

The lab's agent runs with ``--metrics-listen``; ``--cycles`` one-NIC ADD/DEL
cycles go through the warm shims (``benchlab``'s warm column, detection off,
``--nics`` NICs per pod in sequence); then the attach-latency histograms are
read back: per command, the mean time the worker spent on it, and per step
(``cni.timings``) its mean per command and its count per command. What the
steps do not cover is the plugin's own Python between them (config, sysfs
lookups, locks, the result) and the worker's reply.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict

from benchlab import attachment, bench_lab, load_average
from prometheus_client.parser import text_string_to_metric_families

COMMAND = "railyard_cni_command_duration_seconds"
STEP = "railyard_cni_step_duration_seconds"


def scrape(port: int, wait: float = 20.0) -> str:
    """/metrics, once the agent's metrics server answers (it starts after
    the agent's socket appears)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as reply:
                return reply.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def sums(text: str) -> dict[tuple[str, str, str], list[float]]:
    """(family, command, step or result) -> [sum, count]."""
    out: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for family in text_string_to_metric_families(text):
        if family.name not in (COMMAND, STEP):
            continue
        for s in family.samples:
            what = s.labels.get("step") or s.labels.get("result", "")
            key = (family.name, s.labels["command"], what)
            if s.name.endswith("_sum"):
                out[key][0] += s.value
            elif s.name.endswith("_count"):
                out[key][1] += s.value
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--nics", type=int, default=1)
    parser.add_argument("--port", type=int, default=19437)
    args = parser.parse_args()
    listen = f"127.0.0.1:{args.port}"
    with bench_lab(["warm"], 8, prefix="rv-steps-", metrics_listen=listen) as bench:
        col = bench.columns["warm"]
        name = bench.lab.netns_name("steps")
        subprocess.run(["ip", "netns", "add", name], check=True)
        try:
            for n in range(args.cycles + 1):
                confs = [col.make(rail, 0, False) for rail in range(1, args.nics + 1)]
                atts = [
                    attachment(f"steps{n}", f"/var/run/netns/{name}", i + 1)
                    for i in range(args.nics)
                ]
                for conf, att in zip(confs, atts, strict=True):
                    col.runtime.add(conf, att)
                for conf, att in zip(confs, atts, strict=True):
                    col.runtime.delete(conf, att)
                if n == 0:  # the first cycle warms caches: not counted
                    before = sums(scrape(args.port))
        finally:
            subprocess.run(["ip", "netns", "del", name], check=False)
        after = sums(scrape(args.port))
    print(
        f"{args.cycles} cycles of {args.nics} NIC(s), warm, detection off; "
        f"{os.cpu_count()} CPUs; load average {load_average()}"
    )
    for command in ("ADD", "DEL"):
        n = (
            after[(COMMAND, command, "success")][1]
            - before[(COMMAND, command, "success")][1]
        )
        total = (
            after[(COMMAND, command, "success")][0]
            - before[(COMMAND, command, "success")][0]
        )
        print(
            f"{command}: {total / n * 1000:.1f} ms per command in the worker ({n:.0f})"
        )
        rows = []
        for (family, cmd, step), (s, c) in after.items():
            if family != STEP or cmd != command:
                continue
            b = before.get((family, cmd, step), [0.0, 0.0])
            rows.append((s - b[0], c - b[1], step))
        for s, c, step in sorted(rows, reverse=True):
            print(f"  {step:14} {s / n * 1000:6.2f} ms per command ({c / n:.1f} each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
