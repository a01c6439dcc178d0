# SPDX-License-Identifier: Apache-2.0
"""ADD / DEL / 8-NIC pod: railyard ``sriov`` vs Debian's Go plugins, same lab, same run.

Run as root: ``.venv/bin/python benchmarks/bench_plugins.py [--runs N]``.

Both sides do the same work on the simulated host (``railyard_sim.lab``, 8 rails)
through the same libcni-like runtime (``railyard_sim.runtime``), each plugin a
fresh process as under a real runtime:

- railyard: ``[sriov (ipam spiderpool -> ipamd over gRPC), tuning mtu 4200]``
  - the netdev moved into the pod and renamed there, PF-side settings (recorded), MTU,
  addresses, policy routing, ARP/NDP detection and announce; timed with
  detection on (the default) and off;
- Debian (containernetworking-plugins in /usr/lib/cni):
  ``[host-device (ipam host-local), tuning mtu 4200, sbr]`` - move + rename,
  addresses, MTU, source-based routing table. No PF-side settings, no
  detection, no state cache: less work, shown for scale.

Prints the median (and min) of N runs per case, side by side, with the load
average before and after (the machine is shared; compare runs only at similar
load). Bytecode for ``cni`` and ``ipamd`` is compiled first, as
``packaging/install.sh`` does, so a stale or missing ``.pyc`` (e.g. under
PYTHONDONTWRITEBYTECODE=1, which the plugins inherit here) does not put
compile time into the numbers. ``benchmarks/bench_coldstart.py`` breaks the
start-up part down by import.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from railyard_sim import daemon  # noqa: E402
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


def ours(lab: Lab, rail: int, detect: bool) -> dict[str, Any]:
    r = lab.rail(rail)
    pci = r.vfs[0].pci
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


def debian(lab: Lab, rail: int, data_dir: Path) -> dict[str, Any]:
    r = lab.rail(rail)
    first, last = r.range_v4.split("-")
    hd = {
        "type": "host-device",
        "device": r.vfs[0].netdev,
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
    def __init__(self, lab: Lab, runtime: Runtime) -> None:
        self.lab = lab
        self.rt = runtime
        self.n = 0

    def pod(self) -> str:
        self.n += 1
        name = self.lab.netns_name(f"b{self.n}")
        subprocess.run(["ip", "netns", "add", name], check=True)
        return f"/var/run/netns/{name}"

    def drop(self, pod: str) -> None:
        subprocess.run(["ip", "netns", "del", Path(pod).name], check=False)

    def one(self, conf: dict[str, Any]) -> tuple[float, float]:
        pod = self.pod()
        att = Attachment(f"b{self.n}", pod, "net1", args=ARGS)
        try:
            t0 = time.perf_counter()
            self.rt.add(conf, att)
            t1 = time.perf_counter()
            self.rt.delete(conf, att)
            t2 = time.perf_counter()
        finally:
            self.drop(pod)
        return t1 - t0, t2 - t1

    def eight(self, confs: list[dict[str, Any]]) -> tuple[float, float]:
        pod = self.pod()
        atts = [
            Attachment(f"b{self.n}", pod, f"net{i + 1}", args=ARGS)
            for i in range(len(confs))
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


def version_time(binary: Path) -> float:
    """Wall time of one VERSION call: interpreter / binary start-up cost."""
    t0 = time.perf_counter()
    subprocess.run(
        [str(binary)],
        input=b"{}",
        env={"CNI_COMMAND": "VERSION"},
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - t0


def stats(samples: list[float]) -> str:
    return (
        f"{statistics.median(samples) * 1000:8.0f} ms (min {min(samples) * 1000:.0f})"
    )


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def compile_bytecode() -> None:
    for package in ("cni", "ipamd", "sim/railyard_sim"):
        compileall.compile_dir(REPO / package, quiet=1, workers=0)


def run(runs: int) -> None:
    compile_bytecode()
    root = Path(tempfile.mkdtemp(prefix="rv-bench-"))
    with Lab.up(root / "lab", rails=8, vfs_per_pf=1) as lab:
        daemon.start(lab.dir)
        try:
            daemon.apply_pools(lab.dir, lab.pools_file)
            env = {
                **daemon.client_env(lab.dir),
                "RAILYARD_STATE_DIR": str(root / "state"),
                "RAILYARD_NODE_NAME": "bench",
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            }
            rt = Runtime(
                [plugin_bin_dir(lab.dir), DEBIAN_BIN], env=env, cache_dir=root / "cache"
            )
            bench = Bench(lab, rt)
            cases: dict[str, Callable[[], tuple[float, float]]] = {
                "railyard sriov (detection on)": lambda: bench.one(ours(lab, 1, True)),
                "railyard sriov (detection off)": lambda: bench.one(
                    ours(lab, 1, False)
                ),
                "debian host-device+host-local+tuning+sbr": lambda: bench.one(
                    debian(lab, 1, root / "hl")
                ),
                "railyard sriov, 8-NIC pod (detection on)": lambda: bench.eight(
                    [ours(lab, n, True) for n in range(1, 9)]
                ),
                "railyard sriov, 8-NIC pod (detection off)": lambda: bench.eight(
                    [ours(lab, n, False) for n in range(1, 9)]
                ),
                "debian chain, 8-NIC pod": lambda: bench.eight(
                    [debian(lab, n, root / "hl") for n in range(1, 9)]
                ),
            }
            bins = plugin_bin_dir(lab.dir)
            cases["VERSION only: python start, railyard sriov"] = lambda: (
                version_time(bins / "sriov"),
                0.0,
            )
            cases["VERSION only: go start, debian host-device"] = lambda: (
                version_time(DEBIAN_BIN / "host-device"),
                0.0,
            )
            print(
                f"median of {runs} runs (min), each plugin a fresh process; "
                f"{os.cpu_count()} CPUs; load average {load_average()}"
            )
            print(f"{'case':44} {'ADD':>24} {'DEL':>24}")
            for name, case in cases.items():
                adds, dels = [], []
                try:
                    case()  # warm the page cache
                    for _ in range(runs):
                        a, d = case()
                        adds.append(a)
                        dels.append(d)
                except PluginError as exc:
                    print(f"{name}: {exc}\n{exc.stderr[-3000:]}", file=sys.stderr)
                    raise
                print(f"{name:44} {stats(adds):>24} {stats(dels):>24}", flush=True)
            print(f"load average at the end {load_average()}")
        finally:
            daemon.stop(lab.dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    run(parser.parse_args().runs)


if __name__ == "__main__":
    main()
