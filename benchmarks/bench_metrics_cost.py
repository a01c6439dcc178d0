# SPDX-License-Identifier: Apache-2.0
"""What attach-latency metrics and trace ids cost a request (budget: 0.2 ms).

Run: ``.venv/bin/python benchmarks/bench_metrics_cost.py [--requests N]``.

A worker serving a request with ``--metrics-listen`` does, beyond the
plugin's own work: ``Channel.start_request``, one ``timings.step`` per step
the attach code marks (``--steps``, default 24: an ADD of one NIC marks ~12,
the worst case of retries and RDMA twice that), ``Sample.of`` and
``Channel.send`` (JSON, one seqpacket message to a reader in another
process, as the sidecar is). With a ``TRACEPARENT``: parsing it once and
rendering it into each log line's context (``--lines``, default 20; an ADD
at info logs ~3). This times exactly those calls, in-process, against the
same loop doing nothing, and prints the median, mean and p99 per request in
us (the p99 of a loaded 2-core host is mostly preemption, in both loops).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cni import logs, timings  # noqa: E402
from cni.agent.metrics import Channel, Sample  # noqa: E402

ENV = {"TRACEPARENT": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


def one_request(channel: Channel, steps: int, lines: int) -> float:
    t0 = time.perf_counter()
    channel.start_request()
    for n in range(steps):
        with timings.step(timings.STEPS[n % len(timings.STEPS)]):
            pass
    ctx = logs.LogContext("sriov", "ADD", "3f2a8c1d9e00aabb", "net1")
    ctx.trace_id = logs.trace_id(ENV)
    for _ in range(lines):
        ctx.render()
    channel.send(Sample.of("sriov", "ADD", 0, 0.05))
    return time.perf_counter() - t0


def baseline(lines: int) -> float:
    """The same request without metrics nor trace: the context still renders."""
    t0 = time.perf_counter()
    ctx = logs.LogContext("sriov", "ADD", "3f2a8c1d9e00aabb", "net1")
    for _ in range(lines):
        ctx.render()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--lines", type=int, default=20)
    args = parser.parse_args()
    channel = Channel()
    reader = os.fork()
    if reader == 0:  # the sidecar's part: drain, as its thread does
        channel.receive_forever(lambda _sample: None)
        os._exit(0)
    try:
        with_metrics = []
        for n in range(args.requests):
            with_metrics.append(one_request(channel, args.steps, args.lines))
            if n % 50 == 49:
                # Requests come tens of ms apart: let the reader drain (a full
                # socket would make the drops, cheaper than sends, the figure).
                time.sleep(0.005)
        without = [baseline(args.lines) for _ in range(args.requests)]
    finally:
        os.kill(reader, signal.SIGTERM)
        os.waitpid(reader, 0)
    extra = [a - b for a, b in zip(sorted(with_metrics), sorted(without), strict=True)]
    q = statistics.quantiles(extra, n=100)
    print(
        f"{args.requests} requests, {args.steps} steps, {args.lines} log lines each; "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    median, mean = statistics.median(extra) * 1e6, statistics.fmean(extra) * 1e6
    print(
        f"metrics + trace id cost per request: median {median:.1f} us, mean "
        f"{mean:.1f} us, p99 {q[98] * 1e6:.1f} us (budget 200 us); "
        f"dropped {channel.dropped}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
