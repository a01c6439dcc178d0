# SPDX-License-Identifier: Apache-2.0
"""Exporter CPU per scrape: 64 RDMA devices in 64 pods, plus the node's 8 PFs.

Run: ``.venv/bin/python benchmarks/bench_exporter.py [--runs 20] [--pods 64]``
(no root needed).

The node is the exporter tests' fake one (``tests.doubles.rdma_node``): a fake
sysfs tree with each device's 29 hw_counters files (plus ``lifespan``),
GUIDs and a traffic class on the PFs, one sriov record per pod written by the
plugins' record writer (8 rails x 8 VFs), and mlx5-shaped ethtool statistics
(8 vport + 32 per-priority + one non-RDMA stat per netdev) from memory. What
is measured is everything a scrape costs the exporter process except the
ioctls themselves: records, sysfs reads, families, and the text exposition
(``generate_latest``), as ``process_time`` (user + system CPU of this process).

The ioctl side is measured apart with ``--kernel`` (root): the real
``EthtoolStats`` reads a veth in each of N fresh network namespaces (setns,
socket, GSSET_INFO/GSTRINGS/GSTATS/GSET, setns back), which is the per-pod
cost the fake source leaves out.

Prints median and max CPU ms per scrape, samples per scrape, and the process
RSS after the runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from tests.doubles.rdma_node import RdmaNode  # noqa: E402

BUDGET_MS = 100.0


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build(root: Path, pods: int) -> RdmaNode:
    node = RdmaNode(root)
    rails = 8
    per_rail = -(-pods // rails)
    made = 0
    for rail in range(1, rails + 1):
        pf = node.pf(rail, numvfs=per_rail)
        for vf in range(per_rail):
            if made == pods:
                break
            node.pod_nic(pf, vf, f"pod-{rail}-{vf}", ifname=f"net{rail}")
            made += 1
    return node


def _cpu_ms(fn: Callable[[], bytes], runs: int) -> tuple[list[float], bytes]:
    fn()  # warm: imports, first directory reads
    cpu: list[float] = []
    body = b""
    for _ in range(runs):
        t0 = time.process_time()
        body = fn()
        cpu.append((time.process_time() - t0) * 1000)
    return cpu, body


def bench_scrape(runs: int, pods: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-exporter-") as tmp:
        node = build(Path(tmp), pods)
        collector = node.collector()
        registry = CollectorRegistry()
        registry.register(collector)
        print(
            f"scrape of {pods} pod devices + 8 PFs, {runs} runs (fake ethtool source)"
        )
        cases = (
            ("served (RdmaCollector.render)", collector.render),
            ("registry (generate_latest)", lambda: generate_latest(registry)),
        )
        for label, fn in cases:
            cpu, body = _cpu_ms(fn, runs)
            med, worst = statistics.median(cpu), max(cpu)
            verdict = "OK" if med <= BUDGET_MS else "OVER"
            print(
                f"  {label:<31} CPU median {med:6.1f} ms, max {worst:6.1f} ms "
                f"(budget {BUDGET_MS:.0f} ms: {verdict})"
            )
        samples = sum(
            1
            for line in body.decode().splitlines()
            if line and not line.startswith("#")
        )
        print(f"  {samples} samples, {len(body) / 1024:.0f} KiB of text per scrape")
        print(f"  exporter RSS after the runs: {rss_mib():.1f} MiB")


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_process(runs: int, pods: int) -> None:
    """The ``railyard-exporter`` command itself, scraped over HTTP: CPU of the
    process per scrape (from /proc/<pid>/stat) and its RSS. Its netns paths
    are plain files here, so the ethtool reads end at the netns check."""
    import socket
    import urllib.request

    with tempfile.TemporaryDirectory(prefix="bench-exporter-") as tmp:
        build(Path(tmp), pods)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        exe = Path(sys.executable).parent / "railyard-exporter"
        proc = subprocess.Popen(
            [
                str(exe),
                "--listen",
                f"127.0.0.1:{port}",
                "--state-dir",
                f"{tmp}/state",
                "--sysfs-root",
                f"{tmp}/sys",
                "--log-level",
                "WARNING",
            ],
        )
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            for _ in range(100):
                try:
                    urllib.request.urlopen(url, timeout=5).read()
                    break
                except OSError:
                    time.sleep(0.1)
            cpu0 = _proc_cpu_s(proc.pid)
            for _ in range(runs):
                urllib.request.urlopen(url, timeout=10).read()
            per = (_proc_cpu_s(proc.pid) - cpu0) / runs * 1000
            print(
                f"railyard-exporter process over HTTP, {runs} scrapes: "
                f"CPU {per:.1f} ms per scrape (clock ticks of 10 ms), "
                f"RSS {_proc_rss_mib(proc.pid):.1f} MiB"
            )
        finally:
            proc.terminate()
            proc.wait(10)


def bench_kernel(count: int) -> None:
    """Real ethtool ioctls on a veth in each of ``count`` namespaces."""
    from cni.kernel.ethtool import EthtoolStats

    names = [f"rybx{os.getpid() % 10000}-{i}" for i in range(count)]
    try:
        for name in names:
            subprocess.run(["ip", "netns", "add", name], check=True)
            subprocess.run(
                [
                    "ip",
                    "-n",
                    name,
                    "link",
                    "add",
                    "net1",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "p1",
                ],
                check=True,
            )
        source = EthtoolStats()
        for label in ("first scrape (names fetched)", "next scrapes (names cached)"):
            t0 = time.process_time()
            w0 = time.perf_counter()
            read = sum(len(source.read(f"/run/netns/{n}", ["net1"])) for n in names)
            cpu = (time.process_time() - t0) * 1000
            wall = (time.perf_counter() - w0) * 1000
            print(
                f"real ethtool, a veth in each of {count} netns, {label}: "
                f"{read} read, CPU {cpu:.1f} ms, wall {wall:.1f} ms"
            )
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--pods", type=int, default=64)
    ap.add_argument(
        "--kernel", action="store_true", help="also time real ioctls (root)"
    )
    opts = ap.parse_args()
    bench_scrape(opts.runs, opts.pods)
    bench_process(opts.runs, opts.pods)
    if opts.kernel:
        bench_kernel(opts.pods)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
