# SPDX-License-Identifier: Apache-2.0
"""What conflict + gateway detection costs per NIC, on the simulated host.

An 8-NIC pod is attached NIC after NIC in-process (the sriov plugin's
production code with the lab's dependencies and an in-memory IPAM, as the
integration tests run it), once with detection on and once off, ``--runs``
times; the cost per NIC is the difference of the two medians over 8 (it
overlaps the routing work, so this is what it adds to an ADD); then
``detect()`` alone is timed on each NIC of such a pod. Two
layouts: eight rails (one VF each: every NIC on its own segment) and, with
``--shared``, one rail whose eight VFs share one segment (several NICs of
one pod on one L2), which the code before issue 22 refuses (code 102).

Run it against another checkout to compare: ``cd OTHER && PYTHONPATH=.:sim
sudo /path/to/.venv/bin/python /path/to/benchmarks/bench_detection.py``.
Prints the medians (ms) and the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())

from cni.plugins.sriov import commands  # noqa: E402
from tests.doubles.sriov_lab import Harness  # noqa: E402

NICS = 8


def pod_add_ms(h: Harness, shared: bool, detect: bool, run: int) -> float:
    pod = h.pod()
    funcs = h.funcs(commands)
    extra = {} if detect else {"detectIPConflict": False, "detectGateway": False}
    confs = [
        h.conf(rail=1, index=i, **extra) if shared else h.conf(rail=i + 1, **extra)
        for i in range(NICS)
    ]
    cid = f"b{run}{int(detect)}"
    start = time.perf_counter()
    for i, conf in enumerate(confs):
        funcs.add(h.args("ADD", conf, pod, f"net{i + 1}", cid))
    took = (time.perf_counter() - start) * 1000
    for i, conf in reversed(list(enumerate(confs))):
        funcs.del_(h.args("DEL", conf, pod, f"net{i + 1}", cid))
    subprocess.run(["ip", "netns", "del", Path(pod).name], check=True)
    time.sleep(0.3)  # the netns teardown out of the next pod's way
    return took


def detect_ms(h: Harness, shared: bool, calls: int) -> list[float]:
    """``detect()`` alone (conflict + gateway probes, as ADD runs them) on
    each NIC of an 8-NIC pod attached with detection off: ``calls`` times per
    NIC, each call's wall time."""
    from cni.attach.detection import DetectionPolicy, detect
    from cni.ipam import IpamAddress

    pod = h.pod()
    funcs = h.funcs(commands)
    off = {"detectIPConflict": False, "detectGateway": False}
    confs = [
        h.conf(rail=1, index=i, **off) if shared else h.conf(rail=i + 1, **off)
        for i in range(NICS)
    ]
    results = [
        funcs.add(h.args("ADD", conf, pod, f"net{i + 1}", "bd"))
        for i, conf in enumerate(confs)
    ]
    deps = h.deps()
    took = []
    for _ in range(calls):
        for i, result in enumerate(results):
            ips = [
                IpamAddress(str(ip.address), str(ip.gateway) if ip.gateway else None)
                for ip in result.ips
            ]
            start = time.perf_counter()
            detect(deps.probes, f"net{i + 1}", pod, ips, DetectionPolicy())
            took.append((time.perf_counter() - start) * 1000)
    for i, conf in reversed(list(enumerate(confs))):
        funcs.del_(h.args("DEL", conf, pod, f"net{i + 1}", "bd"))
    subprocess.run(["ip", "netns", "del", Path(pod).name], check=True)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--shared", action="store_true", help="one shared segment")
    opts = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="rybench-det-") as tmp:
        rails, vfs = (1, NICS) if opts.shared else (NICS, 1)
        with Harness.up(Path(tmp), rails=rails, vfs_per_pf=vfs) as h:
            times: dict[bool, list[float]] = {True: [], False: []}
            for run in range(opts.runs):
                for detect in (False, True):
                    times[detect].append(pod_add_ms(h, opts.shared, detect, run))
            alone = detect_ms(h, opts.shared, opts.runs)
    on, off = (statistics.median(times[d]) for d in (True, False))
    layout = "one shared segment" if opts.shared else "eight rails"
    print(f"{layout}, {opts.runs} runs: 8-NIC ADD detection off {off:.0f} ms, on "
          f"{on:.0f} ms; detection per NIC {(on - off) / NICS:.1f} ms")  # fmt: skip
    print(f"detect() alone, {len(alone)} calls: median {statistics.median(alone):.1f}"
          f" ms per NIC (min {min(alone):.1f})")  # fmt: skip
    end = os.getloadavg()
    print(f"load average {load[0]:.2f} at the start, {end[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
