# SPDX-License-Identifier: Apache-2.0
"""Cold start of each plugin entry path: wall time and ``-X importtime`` breakdown.

Run as root: ``.venv/bin/python benchmarks/bench_coldstart.py [--runs N] [--no-lab]``.

Every case execs the plugin as a runtime does (a fresh process, CNI_* env,
config on stdin) and is run N times:

- VERSION and ADD with an invalid config, for ``sriov``, ``ib-sriov`` and
  ``rdma`` (the venv's console scripts, and the packaged launchers when
  installed: ``/opt/cni/bin`` or ``--cni-bin``); Debian's Go ``host-device``
  doing the same beside them;
- VERSION through ``cni.skel`` with the commands handed over as a factory
  (``main(lambda: import_module(...).plugin_funcs(), ...)``): what a plugin
  ``__main__`` that defers its commands module pays;
- on a simulated host (``railyard_sim.lab``, one rail, ipamd running): a real
  ``sriov`` ADD and DEL, IPv4 only and dual stack, detection on and off.

Per case: median and min wall time, then the import time by origin, taken
from the run with the smallest total: ``site`` (interpreter start-up hooks,
.pth files), ``cni`` and ``ipamd`` (ours, self time), and for pyroute2, grpc
(with protobuf and the generated stubs), pyudev and asyncio the *cumulative*
time of their first import, i.e. including the standard library they alone
pulled in. ``import total`` is everything the process imported; the rest of
the wall time is interpreter start, the command's own work and exit.
Bytecode of ``cni`` and ``ipamd`` is compiled first (as packaging/install.sh
does), and the plugins run without the caller's environment, so
PYTHONDONTWRITEBYTECODE cannot make them recompile on every start.

Imports: standard library; ``railyard_sim`` for the lab.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from railyard_sim.runtime import DEBIAN_BIN  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
INSTALLED_BIN = Path("/opt/cni/bin")
# CNI type -> this project's console script ([project.scripts]).
PLUGINS = {
    "sriov": "railyard-sriov",
    "ib-sriov": "railyard-ib-sriov",
    "rdma": "railyard-rdma",
    "railyard-ipam": "railyard-ipam",
}
# A plugin main that hands skel a factory instead of the imported commands.
LAZY_MAIN = (
    "from importlib import import_module\n"
    "from cni.skel import main\n"
    "main(lambda: import_module('cni.plugins.{}.commands').plugin_funcs(), 'lazy')\n"
)
ENTRIES = ("sriov", "ib-sriov", "rdma")
INVALID = b'{"cniVersion": "1.0.0", "name": "rail1", "type": "x"}'
ARGS = "IgnoreUnknown=true;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=p"
# Import-time columns: (label, how the module names are matched, cumulative?).
GROUPS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("site", ("site",), True),
    ("cni", ("cni",), False),
    ("ipamd", ("ipamd",), False),
    ("pyroute2", ("pyroute2",), True),
    ("grpc+pb", ("grpc", "google"), True),
    ("pyudev", ("pyudev",), True),
    ("asyncio", ("asyncio",), True),
)


# ------------------------------------------------------------- importtime


@dataclass
class _Node:
    name: str
    level: int
    self_us: int
    cum_us: int
    ancestors: list[str] = field(default_factory=list)


def _parse_importtime(stderr: str) -> list[_Node]:
    """``import time: self | cumulative | <indent>name`` lines as a tree.

    Python prints children before their parent; read in reverse, it is a
    pre-order walk where the indentation gives the depth.
    """
    nodes: list[_Node] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        self_s, cum_s, name = line.split("|", 2)
        self_raw = self_s.replace("import time:", "").strip()
        if not self_raw.isdigit():
            continue  # the header line
        stripped = name.lstrip(" ")
        level = (len(name) - len(stripped) - 1) // 2
        nodes.append(_Node(stripped, level, int(self_raw), int(cum_s.strip())))
    stack: list[_Node] = []
    for node in reversed(nodes):
        while stack and stack[-1].level >= node.level:
            stack.pop()
        node.ancestors = [n.name for n in stack]
        stack.append(node)
    return nodes


def _in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def breakdown(stderr: str) -> dict[str, float]:
    """Milliseconds per GROUPS column, plus ``total``."""
    nodes = _parse_importtime(stderr)
    out: dict[str, float] = {}
    for label, prefixes, cumulative in GROUPS:
        if cumulative:
            us = sum(
                n.cum_us
                for n in nodes
                if _in(n.name, prefixes)
                and not any(_in(a, prefixes) for a in n.ancestors)
            )
        else:
            us = sum(n.self_us for n in nodes if _in(n.name, prefixes))
        out[label] = us / 1000
    out["total"] = sum(n.cum_us for n in nodes if n.level == 0) / 1000
    return out


# ------------------------------------------------------------------ cases


@dataclass
class Sample:
    wall: float
    imports: dict[str, float] | None  # None for the Go plugins


def exec_once(
    argv: list[str],
    env: Mapping[str, str],
    stdin: bytes,
    importtime: bool,
    ok_codes: tuple[int, ...] = (0, 1),
) -> Sample:
    full = dict(env)
    if importtime:
        full["PYTHONPROFILEIMPORTTIME"] = "1"
    t0 = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, env=full, capture_output=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in ok_codes:
        raise RuntimeError(
            f"{argv[0]} exit {proc.returncode}: {proc.stdout.decode()} "
            f"{proc.stderr.decode()[-2000:]}"
        )
    return Sample(wall, breakdown(proc.stderr.decode()) if importtime else None)


@dataclass
class Row:
    name: str
    samples: list[Sample]

    def line(self) -> str:
        walls = [s.wall * 1000 for s in self.samples]
        text = f"{self.name:46} {statistics.median(walls):7.0f} {min(walls):6.0f}"
        with_imports = [s for s in self.samples if s.imports is not None]
        if not with_imports:
            return text
        best = min(with_imports, key=lambda s: s.imports["total"])  # type: ignore[index]
        assert best.imports is not None
        cols = [label for label, _, _ in GROUPS] + ["total"]
        return text + "".join(f" {best.imports[c]:8.1f}" for c in cols)


def header() -> str:
    cols = [label for label, _, _ in GROUPS] + ["import total"]
    return f"{'case':46} {'median':>7} {'min':>6}" + "".join(f" {c:>8}" for c in cols)


def repeat(name: str, runs: int, case: Callable[[], Sample]) -> Row:
    case()  # warm the page cache and the .pyc files
    row = Row(name, [case() for _ in range(runs)])
    print(row.line(), flush=True)
    return row


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if os.environ.get("PYTHONPATH"):
        # Lets a before/after comparison run another checkout's cni package.
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return {**env, **(extra or {})}


def launcher_argv(launcher: Path) -> list[str]:
    """The packaged launcher run as its shebang would, plus ``-X importtime``.

    Its shebang has ``-I``, which ignores PYTHONPROFILEIMPORTTIME.
    """
    shebang = launcher.read_text().splitlines()[0].removeprefix("#!").split()
    return [*shebang, "-X", "importtime", str(launcher)]


def entry_cases(runs: int, state: Path, installed: Path) -> None:
    add_env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "coldstart0001",
        "CNI_NETNS": "/var/run/netns/rq-coldstart-missing",
        "CNI_IFNAME": "net1",
        "CNI_PATH": str(DEBIAN_BIN),
        "RAILYARD_STATE_DIR": str(state),
    }
    bins: list[tuple[str, list[str]]] = []
    for entry in ENTRIES:
        script = VENV_BIN / PLUGINS[entry]
        if script.exists():
            bins.append((f"venv {PLUGINS[entry]}", [str(script)]))
        if (installed / entry).exists():
            bins.append((f"packaged {entry}", launcher_argv(installed / entry)))
    for label, argv in bins:
        repeat(
            f"{label} VERSION",
            runs,
            lambda a=argv: exec_once(  # type: ignore[misc]
                a, base_env({"CNI_COMMAND": "VERSION"}), b"", True
            ),
        )
        repeat(
            f"{label} ADD invalid config",
            runs,
            lambda a=argv: exec_once(  # type: ignore[misc]
                a, base_env(add_env), INVALID, True
            ),
        )
    for entry in ENTRIES:
        code = LAZY_MAIN.format(entry.replace("-", "_"))
        repeat(
            f"lazy main {entry} VERSION",
            runs,
            lambda c=code: exec_once(  # type: ignore[misc]
                [sys.executable, "-c", c],
                base_env({"CNI_COMMAND": "VERSION"}),
                b"",
                True,
            ),
        )
    go = DEBIAN_BIN / "host-device"
    repeat(
        "go host-device VERSION",
        runs,
        lambda: exec_once([str(go)], base_env({"CNI_COMMAND": "VERSION"}), b"", False),
    )
    repeat(
        "go host-device ADD invalid config",
        runs,
        lambda: exec_once([str(go)], base_env(add_env), INVALID, False),
    )


def lab_cases(runs: int, root: Path) -> None:
    from railyard_sim import daemon
    from railyard_sim.lab import Lab

    with Lab.up(root / "lab", rails=1, vfs_per_pf=1) as lab:
        daemon.start(lab.dir)
        try:
            daemon.apply_pools(lab.dir, lab.pools_file)
            env = base_env(
                {
                    **daemon.client_env(lab.dir),
                    "RAILYARD_STATE_DIR": str(root / "state"),
                    "RAILYARD_NODE_NAME": "bench",
                    "CNI_PATH": str(DEBIAN_BIN),
                    "CNI_IFNAME": "net1",
                    "CNI_ARGS": ARGS,
                }
            )
            r = lab.rail(1)
            counter = iter(range(1_000_000))

            def conf(detect: bool, v6: bool) -> bytes:
                ipam: dict[str, Any] = {
                    "type": "spiderpool",
                    "default_ipv4_ippool": [r.pool_v4],
                }
                if v6:
                    ipam["default_ipv6_ippool"] = [r.pool_v6]
                return json.dumps(
                    {
                        "cniVersion": "1.0.0",
                        "name": "coldstart",
                        "type": "sriov",
                        "deviceID": r.vfs[0].pci,
                        "detectIPConflict": detect,
                        "detectGateway": detect,
                        "ipam": ipam,
                    }
                ).encode()

            binary = str(lab.bin_dir / "sriov")

            def add_del(stdin: bytes) -> tuple[Sample, Sample]:
                n = next(counter)
                name = lab.netns_name(f"c{n}")
                subprocess.run(["ip", "netns", "add", name], check=True)
                cid = {"CNI_CONTAINERID": f"coldstart{n:06d}"}
                netns = {"CNI_NETNS": f"/var/run/netns/{name}"}
                try:
                    add = exec_once(
                        [binary],
                        {**env, **cid, **netns, "CNI_COMMAND": "ADD"},
                        stdin,
                        True,
                        (0,),
                    )
                    rm = exec_once(
                        [binary],
                        {**env, **cid, **netns, "CNI_COMMAND": "DEL"},
                        stdin,
                        True,
                        (0,),
                    )
                finally:
                    subprocess.run(["ip", "netns", "del", name], check=False)
                return add, rm

            for label, detect, v6 in (
                ("IPv4, detection on", True, False),
                ("IPv4, detection off", False, False),
                ("dual stack, detection on", True, True),
                ("dual stack, detection off", False, True),
            ):
                stdin = conf(detect, v6)
                add_del(stdin)  # warm-up
                pairs = [add_del(stdin) for _ in range(runs)]
                print(Row(f"sriov ADD {label}", [a for a, _ in pairs]).line())
                print(Row(f"sriov DEL {label}", [d for _, d in pairs]).line())
        finally:
            daemon.stop(lab.dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--no-lab", action="store_true", help="entry paths only")
    parser.add_argument(
        "--cni-bin",
        type=Path,
        default=INSTALLED_BIN,
        help="bin dir of a packaged install (packaging/install.sh --cni-bin-dir)",
    )
    opts = parser.parse_args()
    for package in ("cni", "ipamd", "sim/railyard_sim"):
        compileall.compile_dir(REPO / package, quiet=1, workers=0)
    with tempfile.TemporaryDirectory(prefix="rq-coldstart-") as tmp:
        root = Path(tmp)
        print(
            f"{opts.runs} runs per case, wall ms (median, min); import ms from the run "
            f"with the least import time; {os.cpu_count()} CPUs, "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        print(header())
        entry_cases(opts.runs, root / "state", opts.cni_bin)
        if not opts.no_lab:
            lab_cases(opts.runs, root)
        print(
            f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )


if __name__ == "__main__":
    main()
