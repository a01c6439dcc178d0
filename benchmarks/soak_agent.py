# SPDX-License-Identifier: Apache-2.0
"""railyard-agent soak: N ADD/DEL cycles through the shim, memory and fds before/after.

Run as root: ``.venv/bin/python benchmarks/soak_agent.py [--cycles 10000]``.

One rail of the simulated host, the lab's agent (``railyard_sim.agent``) and
ipamd; each cycle is a ``sriov`` ADD then DEL (detection off) through the
warm-path shim, as a runtime execs it. Prints the agent's RSS, PSS-free view
(``VmRSS``), its open file descriptors and threads, and its workers' count,
summed RSS and descriptors, before, every 10 % and after. Growth in the
parent's is a leak in the long-lived process; the workers' stay bounded as
each is replaced after its share of requests. ``--metrics-listen HOST:PORT``
runs the agent with its /metrics (attach latency): the metrics server is one
more child, shown on its own line, whose memory must stay flat too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from railyard_sim import agent, daemon  # noqa: E402
from railyard_sim.lab import Lab  # noqa: E402
from railyard_sim.runtime import Attachment, Runtime  # noqa: E402


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {
        k: v.strip() for k, v in (line.split(":", 1) for line in lines if ":" in line)
    }


def _kb(value: str) -> int:
    return int(value.split()[0])


def vitals(pid: int) -> str:
    """The parent's RSS, size, fds and threads; its workers' count, summed RSS
    and fds (a worker serves up to 200 requests, then a fresh one replaces it)."""
    fields = _status(pid)
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    rss = wfds = 0
    for child in children:
        try:
            rss += _kb(_status(int(child))["VmRSS"])
            wfds += len(os.listdir(f"/proc/{child}/fd"))
        except (OSError, KeyError):
            continue  # it ended meanwhile
    return (
        f"VmRSS {fields['VmRSS']:>10}  VmSize {fields['VmSize']:>10}"
        f"  fds {fds:3d}  threads {fields['Threads']}"
        f"  | workers {len(children)}  their VmRSS {rss} kB  fds {wfds}"
    )


def metrics_server(pid: int) -> int:
    """The agent's metrics server: its first child (the agent starts it before
    its first spare worker; the workers come and go, it stays)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return min(int(child) for child in children)


def server_vitals(pid: int) -> str:
    try:
        fields = _status(pid)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return f"  metrics server {pid} is gone"
    return f"  metrics server {pid}: VmRSS {fields['VmRSS']}  fds {fds}"


def run(cycles: int, metrics_listen: str = "") -> None:
    with tempfile.TemporaryDirectory(prefix="ry-soak-") as tmp:
        root = Path(tmp)
        with Lab.up(root / "lab", rails=1, vfs_per_pf=1) as lab:
            daemon.start(lab.dir)
            agent.start(lab.dir, metrics_listen=metrics_listen)
            try:
                daemon.apply_pools(lab.dir, lab.pools_file)
                pid = agent.running_pid(lab.dir)
                assert pid is not None
                r = lab.rail(1)
                conf = {
                    "cniVersion": "1.0.0",
                    "name": "soak",
                    "plugins": [
                        {
                            "type": "sriov",
                            "deviceID": r.vfs[0].pci,
                            "detectIPConflict": False,
                            "detectGateway": False,
                            "ipam": {
                                "type": "spiderpool",
                                "default_ipv4_ippool": [r.pool_v4],
                            },
                        }
                    ],
                }
                env = {
                    **daemon.client_env(lab.dir),
                    "RAILYARD_STATE_DIR": str(root / "state"),
                    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                }
                bins = agent.shim_bin_dir(root / "bin", lab.dir)
                rt = Runtime([bins], env=env, cache_dir=root / "cache")
                ns = lab.netns_name("soak")
                subprocess.run(["ip", "netns", "add", ns], check=True)
                try:
                    pod = f"/var/run/netns/{ns}"
                    # One cycle first: the page cache and ipamd's first connection.
                    att = Attachment("soak-warmup", pod, "net1")
                    rt.add(conf, att)
                    rt.delete(conf, att)
                    server = metrics_server(pid) if metrics_listen else 0
                    extra = (lambda: server_vitals(server)) if server else str
                    print(f"before      {vitals(pid)}{extra()}", flush=True)
                    t0 = time.monotonic()
                    for i in range(1, cycles + 1):
                        att = Attachment(f"soak{i}", pod, "net1")
                        rt.add(conf, att)
                        rt.delete(conf, att)
                        if i % max(1, cycles // 10) == 0:
                            print(f"{i:>6} done  {vitals(pid)}{extra()}", flush=True)
                    elapsed = time.monotonic() - t0
                    time.sleep(0.5)  # the last worker is idle again
                    print(f"after       {vitals(pid)}{extra()}")
                    print(
                        f"{cycles} ADD/DEL cycles in {elapsed:.0f} s "
                        f"({elapsed / cycles * 1000:.0f} ms per cycle); "
                        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
                    )
                finally:
                    subprocess.run(["ip", "netns", "del", ns], check=False)
            finally:
                agent.stop(lab.dir)
                daemon.stop(lab.dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10000)
    parser.add_argument("--metrics-listen", default="", metavar="HOST:PORT")
    args = parser.parse_args()
    run(args.cycles, args.metrics_listen)


if __name__ == "__main__":
    main()
