# SPDX-License-Identifier: Apache-2.0
"""Daemon memory under pool churn (not a test): does RSS come back?

Starts a real ``ipamd serve`` (SQLite file, unix socket, INFO logging to a
file) and, over gRPC with ``ipamd.client``, applies and deletes one large
SpiderIPPool ``--cycles`` times: a 10.0.0.0/8 pool whose ``excludeIPs`` lists
``--entries`` single addresses (default: the accepted maximum,
``ipamd.pools.MAX_LIST_ENTRIES``, the worst a pool file may hold). The
daemon's VmRSS is sampled from /proc before the first cycle and at fixed
points after; the run fails (exit 1) when RSS after the last cycle exceeds
RSS after the first tenth by more than ``--slack-mb``.

Usage: ``.venv/bin/python benchmarks/bench_pool_churn.py [--cycles 1000]
[--entries 10000] [--slack-mb 4]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ipamd.api.v1 import ipam_pb2 as pb  # noqa: E402
from ipamd.api.v1.version import API_VERSION  # noqa: E402
from ipamd.client import IpamdCallError, IpamdClient  # noqa: E402
from ipamd.pools import MAX_LIST_ENTRIES  # noqa: E402


def manifest(entries: int) -> str:
    lines = [
        "apiVersion: spiderpool.spidernet.io/v2beta1",
        "kind: SpiderIPPool",
        "metadata: {name: churn}",
        "spec:",
        "  subnet: 10.0.0.0/8",
        "  ips: [10.0.0.1-10.255.255.254]",
        "  excludeIPs:",
    ]
    # Every other address, so no two entries merge into one range.
    for i in range(1, entries + 1):
        n = 2 * i
        lines.append(f"    - 10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}")
    return "\n".join(lines) + "\n"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=MAX_LIST_ENTRIES)
    parser.add_argument("--slack-mb", type=float, default=4.0)
    opts = parser.parse_args()

    text = manifest(opts.entries)
    checkpoints = sorted(
        {1, max(1, opts.cycles // 10), opts.cycles // 4, opts.cycles // 2}
        | {3 * opts.cycles // 4, opts.cycles}
    )
    with tempfile.TemporaryDirectory(prefix="ry-churn-") as tmp:
        work = Path(tmp)
        sock = work / "run" / "ipamd.sock"
        log = (work / "ipamd.log").open("wb")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ipamd",
                "serve",
                "--db",
                f"sqlite:///{work / 'ipamd.db'}",
                "--listen",
                str(sock),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            client = IpamdClient(str(sock), timeout=60)
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.status()
                    break
                except IpamdCallError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.1)
            apply = pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=text)
            delete = pb.DeletePoolRequest(client_version=API_VERSION, name="churn")
            samples = [(0, rss_mb(proc.pid))]
            start = time.monotonic()
            for cycle in range(1, opts.cycles + 1):
                client.call("ApplyPools", apply)
                client.call("DeletePool", delete)
                if cycle in checkpoints:
                    samples.append((cycle, rss_mb(proc.pid)))
            elapsed = time.monotonic() - start
            refused = ""
            try:
                big = manifest(opts.entries * 10)
                client.call(
                    "ApplyPools",
                    pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=big),
                )
            except IpamdCallError as err:
                refused = f"{err.code.name}: {err.details}"
            client.close()
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()
        traceback_logged = "Traceback" in (work / "ipamd.log").read_text()

    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(
        f"pool churn: {opts.cycles} apply/delete cycles of a pool with "
        f"{opts.entries} excludeIPs, {elapsed:.1f} s "
        f"({1000 * elapsed / opts.cycles:.1f} ms/cycle); load average {load}"
    )
    for cycle, mb in samples:
        print(f"  after {cycle:>5} cycles: daemon RSS {mb:7.1f} MB")
    print(f"  {opts.entries * 10} excludeIPs: {refused or 'accepted'}")
    print(f"  traceback in the daemon log: {'yes' if traceback_logged else 'no'}")
    base = next(mb for cycle, mb in samples if cycle >= max(1, opts.cycles // 10))
    growth = samples[-1][1] - base
    print(
        f"  growth after the first tenth: {growth:+.1f} MB (slack {opts.slack_mb} MB)"
    )
    return 0 if growth <= opts.slack_mb and not traceback_logged else 1


if __name__ == "__main__":
    sys.exit(main())
