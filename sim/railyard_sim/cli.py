# SPDX-License-Identifier: Apache-2.0
"""``railyard-sim``: build the simulated host, attach a pod to its rails, tear down.

    railyard-sim up [--lab DIR] [--rails 8] [--ib-rails 0] [--vfs-per-pf 2]
                    [--rail-subnet CIDR ...]
    railyard-sim pod NAME [--nics 8] [--rdma] [--ipv6]
    railyard-sim show NAME
    railyard-sim unpod NAME
    railyard-sim down
    railyard-sim exporter [--listen 127.0.0.1:9435]   # railyard-exporter on the lab
    railyard-sim counters bump NAME net1 out_of_sequence [--by 5]
    railyard-sim demo          # all of the above with an 8-NIC pod

Run as root in the netns where runtimes run plugins (the root netns). Progress
goes to stderr; what an operator reads goes to stdout; any failed step exits 1.

Imports: click and ``railyard_sim`` (never loaded by a plugin process).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from railyard_sim import agent, daemon, pods
from railyard_sim.kernel_seams import KernelSeamError
from railyard_sim.lab import MANIFEST, SIM_MARKER, Lab, LabError, is_lab_dir
from railyard_sim.runtime import DEBIAN_BIN, PluginError
from railyard_sim.shapes import SHAPES

DEFAULT_LAB = Path(os.environ.get("RAILYARD_SIM_LAB", "/run/railyard-sim/lab"))
F = TypeVar("F", bound=Callable[..., Any])


def say(msg: str) -> None:
    click.echo(f"[railyard-sim {time.strftime('%H:%M:%S')}] {msg}", err=True)


def lab_option(f: F) -> F:
    return click.option(
        "--lab",
        "lab_dir",
        type=click.Path(path_type=Path),
        default=DEFAULT_LAB,
        show_default=True,
        help="Lab directory (env RAILYARD_SIM_LAB).",
    )(f)


class Failed(click.ClickException):
    """A step failed: message on stderr, exit status 1."""


# ------------------------------------------------------------------- steps


def do_up(
    lab_dir: Path,
    rails: int,
    ib_rails: int,
    vfs_per_pf: int,
    metrics_listen: str = "",
    warm: bool = True,
    kernel_seams: frozenset[str] = frozenset(),
    shape: str = "",
    agent_metrics: str = "",
    rail_subnets: tuple[str, ...] = (),
) -> Lab:
    started = time.monotonic()
    try:
        lab = Lab.up(
            lab_dir,
            rails=rails,
            vfs_per_pf=vfs_per_pf,
            ib_rails=ib_rails,
            progress=True,
            kernel_seams=kernel_seams,
            shape=shape,
            rail_subnets=rail_subnets,
        )
    except (LabError, ValueError, OSError, KernelSeamError) as exc:
        raise Failed(f"up: {exc}") from exc
    try:
        say("starting ipamd (SQLite in the lab)")
        pid = daemon.start(lab.dir, metrics_listen=metrics_listen)
        say(f"ipamd pid {pid} on {daemon.socket_path(lab.dir)}; applying pools")
        daemon.apply_pools(lab.dir, lab.pools_file)
        if warm:
            agent_pid = agent.start(lab.dir, metrics_listen=agent_metrics)
            say(
                f"railyard-agent pid {agent_pid} on {agent.socket_path(lab.dir)} "
                "(plugins run warm; --no-agent runs them directly)"
                + (f"; /metrics on {agent_metrics}" if agent_metrics else "")
            )
    except (daemon.DaemonError, agent.AgentError, OSError) as exc:
        do_down(lab.dir)
        raise Failed(f"up: {exc}") from exc
    click.echo(f"lab {lab.id} in {lab.dir} ({time.monotonic() - started:.1f}s)")
    for r in lab.rails:
        vfs = ", ".join(f"{v.pci}={v.netdev}/{v.rdma}" for v in r.vfs)
        click.echo(
            f"  rail {r.number} {r.kind:<4} PF {r.pf_pci} {r.pf_netdev} "
            f"mtu {r.pf_mtu} gw {r.gateway_v4} {r.gateway_v6}  VFs {vfs}"
        )
    click.echo(f"  pools {lab.pools_file}")
    click.echo("environment of a plugin run by hand on this host (copy-paste):")
    for key, value in hand_run_env(lab).items():
        click.echo(f"  export {key}={value}")
    return lab


def hand_run_env(lab: Lab) -> dict[str, str]:
    """What a plugin exec'd by hand needs here: the lab's launchers first in
    CNI_PATH (Debian's plugins after them), its ipamd, its state dir."""
    return {
        "CNI_PATH": f"{lab.bin_dir}:{DEBIAN_BIN}",
        **daemon.client_env(lab.dir),
        "RAILYARD_STATE_DIR": str(lab.state_dir),
    }


def do_pod(
    lab_dir: Path,
    name: str,
    nics: int | None,
    rdma: bool,
    ipv6: bool,
    cni_version: str,
    mtu: int | None,
    ib_guid: bool = False,
) -> None:
    lab = _load(lab_dir)
    count = nics if nics is not None else len(lab.rails)
    started = time.monotonic()
    try:
        pod = pods.create(lab, name)
    except LabError as exc:
        raise Failed(f"pod: {exc}") from exc
    say(f"pod {name}: netns {pod.netns}, eth0 {pod.eth0_ip}")
    try:
        pods.attach(lab, pod, count, rdma, ipv6, cni_version, mtu, say, ib_guid)
    except (PluginError, LabError, OSError) as exc:
        raise Failed(f"pod {name}: {exc}") from exc
    click.echo(
        f"pod {name}: {count} NICs attached in "
        f"{time.monotonic() - started:.1f}s (netns {pod.netns})"
    )
    for nic in pod.nics:
        ips = ", ".join(ip["address"] for ip in (nic.result or {}).get("ips", []))
        click.echo(
            f"  {nic.ifname}  rail {nic.rail} {nic.kind:<4} VF {nic.pci} "
            f"({nic.host_netdev})  {ips}"
        )


def do_show(lab_dir: Path, name: str) -> None:
    lab = _load(lab_dir)
    try:
        pod = pods.load(lab, name)
    except LabError as exc:
        raise Failed(str(exc)) from exc
    text, ok = pods.show(lab, pod)
    click.echo(text, nl=False)
    from railyard_sim.counters import pod_counters_text

    click.echo("")
    click.echo(pod_counters_text(lab, pods.POD_NAMESPACE, pod.name), nl=False)
    if not ok:
        raise Failed(f"show {name}: a NIC cannot reach its gateway")


def do_unpod(lab_dir: Path, name: str) -> None:
    lab = _load(lab_dir)
    try:
        pod = pods.load(lab, name)
    except LabError as exc:
        raise Failed(str(exc)) from exc
    started = time.monotonic()
    problems = pods.detach(lab, pod, say)
    if problems:
        raise Failed(f"unpod {name}:\n  " + "\n  ".join(problems))
    click.echo(
        f"pod {name}: every VF back in the host with its name, MAC, MTU, VF settings, "
        f"RDMA device ({time.monotonic() - started:.1f}s)"
    )


def do_down(lab_dir: Path) -> None:
    """Pods, ipamd, lab: removed whatever state they are in (also half-built).

    Pod DELs come first so ipamd can release their addresses; a pod that cannot
    be DELeted is a problem reported with exit 1, but the teardown goes on:
    the daemon is stopped and every netns, link and file removed anyway.
    """
    lab_dir = Path(lab_dir).absolute()
    if lab_dir.exists() and not is_lab_dir(lab_dir):
        # Checked before anything is stopped or removed: a mistyped --lab must
        # never cost someone's directory.
        raise Failed(
            f"down: {lab_dir} is not a lab directory (no {SIM_MARKER} in it); "
            "nothing was removed"
        )
    if not lab_dir.exists():
        click.echo(f"no lab in {lab_dir}: nothing to remove")
        return
    need_root()
    problems: list[str] = []
    try:
        lab: Lab | None = Lab.load(lab_dir)
    except LabError as exc:
        lab = None
        if (lab_dir / MANIFEST).exists():
            problems.append(str(exc))
    try:
        if lab is not None:
            for name in pods.names(lab):
                say(f"down: removing pod {name}")
                # One bad pod record must not stop the teardown of the rest.
                try:
                    problems += pods.detach(lab, pods.load(lab, name), say)
                except Exception as exc:
                    problems.append(f"pod {name}: {exc}")
    finally:
        if agent.running_pid(lab_dir) is not None:
            say("down: stopping railyard-agent")
        agent.stop(lab_dir)
        agent.remove_files(lab_dir)
        say("down: stopping ipamd")
        daemon.stop(lab_dir)
        if lab is not None:
            say(f"down: removing lab {lab.id}")
            lab.down()
        daemon.remove_files(lab_dir)
        from railyard_sim.counters import remove_files as remove_counter_files

        remove_counter_files(lab_dir)
        for sub in (pods.PODS, pods.RESULTS, "state", "cni-bin"):
            shutil.rmtree(lab_dir / sub, ignore_errors=True)
        try:
            lab_dir.rmdir()
        except OSError:
            pass
    if problems:
        raise Failed(
            "down: pods left problems (the lab is removed anyway):\n  "
            + "\n  ".join(problems)
        )
    click.echo(f"lab in {lab_dir} removed")


def _load(lab_dir: Path) -> Lab:
    try:
        return Lab.load(lab_dir)
    except LabError as exc:
        raise Failed(str(exc)) from exc


# --------------------------------------------------------------------- CLI


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """The simulated host: SR-IOV rails, RDMA devices and ipamd on veth + netns."""


def need_root() -> None:
    """Checked by each command before it touches the host (not for ``-h``,
    nor for a ``down`` that refuses a directory or has nothing to remove)."""
    if os.geteuid() != 0:
        raise Failed("run as root: the simulated host needs network namespaces")


@main.command()
@lab_option
@click.option("--rails", type=int, help="RoCE rails [default: 8, or the shape's NICs].")
@click.option("--ib-rails", default=0, show_default=True, help="InfiniBand rails.")
@click.option("--vfs-per-pf", default=2, show_default=True)
@click.option(
    "--shape",
    type=click.Choice(sorted(SHAPES)),
    default=None,
    help="A server's PCIe topology in the fake sysfs: dgx (8 GPUs, 8 NICs, "
    "4 switches, 2 sockets) or split (4 GPUs on socket 0, half the NICs on "
    "socket 1); its NICs are the rails. `railyard rails --sysfs <lab>/sys`.",
)
@click.option(
    "--ipamd-metrics", default="", help="HOST:PORT for ipamd's Prometheus /metrics."
)
@click.option(
    "--no-agent",
    is_flag=True,
    help="Do not start railyard-agent: every plugin call runs directly.",
)
@click.option(
    "--kernel-seam",
    "kernel_seams",
    type=click.Choice(["vf", "rdma"]),
    multiple=True,
    help="Let the kernel answer: 'vf' makes the PFs netdevsim devices (their VF "
    "tables real), 'rdma' uses the real RDMA netlink (devices named as the lab's "
    "must exist). Needs a kernel with netdevsim.",
)
@click.option(
    "--agent-metrics",
    default="",
    metavar="HOST:PORT",
    help="railyard-agent's /metrics here: attach latency per command and step, "
    "and the lab's RDMA counters.",
)
@click.option(
    "--rail-subnet",
    "rail_subnets",
    multiple=True,
    help="This node's IPv4 subnet of each RoCE rail, in order (one per rail): "
    "the rail's gateway is its first address, its PF holds the last host one "
    "(per-node rail subnets, matchMasterSubnet).",
)
def up(
    lab_dir: Path,
    rails: int | None,
    ib_rails: int,
    vfs_per_pf: int,
    shape: str | None,
    ipamd_metrics: str,
    no_agent: bool,
    kernel_seams: tuple[str, ...],
    agent_metrics: str,
    rail_subnets: tuple[str, ...],
) -> None:
    """Build the lab, start ipamd and railyard-agent, apply the lab's pools."""
    need_root()
    if agent_metrics and no_agent:
        raise click.UsageError("--agent-metrics needs the agent (not --no-agent)")
    shape = shape or ""
    if rails is None:
        rails = len(SHAPES[shape].nics) if shape else 8
    do_up(
        lab_dir,
        rails,
        ib_rails,
        vfs_per_pf,
        ipamd_metrics,
        warm=not no_agent,
        kernel_seams=frozenset(kernel_seams),
        shape=shape,
        agent_metrics=agent_metrics,
        rail_subnets=rail_subnets,
    )


pod_options: list[Callable[[F], F]] = [
    click.option(
        "--nics",
        type=int,
        default=None,
        help="NICs net1..netN, one per rail (default: every rail).",
    ),
    click.option(
        "--rdma/--no-rdma",
        default=True,
        show_default=True,
        help="Move each VF's RDMA device too.",
    ),
    click.option(
        "--ipv6/--no-ipv6",
        default=True,
        show_default=True,
        help="Also allocate from the IPv6 pools.",
    ),
    click.option(
        "--cni-version",
        default="0.3.1",
        show_default=True,
        help="cniVersion of the conflists (SpiderMultusConfig default).",
    ),
    click.option(
        "--ib-guid/--no-ib-guid",
        default=True,
        show_default=True,
        help="Give IB NICs a GUID (runtimeConfig.infinibandGUID): VF rebind.",
    ),
    click.option(
        "--mtu",
        type=int,
        default=None,
        help="Chain a tuning plugin with this MTU, as Spiderpool does.",
    ),
]


def with_pod_options(f: F) -> F:
    for opt in reversed(pod_options):
        f = opt(f)
    return f


@main.command()
@lab_option
@click.argument("name")
@with_pod_options
def pod(
    lab_dir: Path,
    name: str,
    nics: int | None,
    rdma: bool,
    ipv6: bool,
    cni_version: str,
    ib_guid: bool,
    mtu: int | None,
) -> None:
    """Create pod NAME and ADD one VF per rail through the real plugins."""
    need_root()
    do_pod(lab_dir, name, nics, rdma, ipv6, cni_version, mtu, ib_guid)


@main.command()
@lab_option
@click.argument("name")
def show(lab_dir: Path, name: str) -> None:
    """Addresses, rules, per-NIC tables, gateway pings and RDMA devices of NAME."""
    need_root()
    do_show(lab_dir, name)


@main.command()
@lab_option
@click.argument("name")
def unpod(lab_dir: Path, name: str) -> None:
    """DEL the pod's NICs in reverse and check every VF is back as it was."""
    need_root()
    do_unpod(lab_dir, name)


@main.command()
@lab_option
def down(lab_dir: Path) -> None:
    """Remove pods, ipamd and the lab (every netns, link and file)."""
    do_down(lab_dir)


@main.command()
@click.option(
    "--lab",
    "lab_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Lab directory (default: a fresh temporary one).",
)
@click.option("--rails", default=8, show_default=True)
@click.option("--ib-rails", default=0, show_default=True)
@click.option("--vfs-per-pf", default=2, show_default=True)
@with_pod_options
@click.option("--no-agent", is_flag=True, help="Run every plugin call directly.")
def demo(
    lab_dir: Path | None,
    rails: int,
    ib_rails: int,
    vfs_per_pf: int,
    nics: int | None,
    rdma: bool,
    ipv6: bool,
    cni_version: str,
    ib_guid: bool,
    mtu: int | None,
    no_agent: bool,
) -> None:
    """up, a pod on every rail, show, unpod, down; exit 1 if any step fails.

    The pod options and their defaults are ``pod``'s.
    """
    need_root()
    if lab_dir is None:
        lab_dir = Path(tempfile.mkdtemp(prefix="railyard-sim-"))
        lab_dir.rmdir()  # Lab.up creates it and down removes it
    failures: list[str] = []
    started = time.monotonic()
    try:
        do_up(lab_dir, rails, ib_rails, vfs_per_pf, warm=not no_agent)
        steps: list[tuple[str, Callable[[], None]]] = [
            (
                "pod",
                lambda: do_pod(
                    lab_dir, "demo", nics, rdma, ipv6, cni_version, mtu, ib_guid
                ),
            ),
            ("show", lambda: do_show(lab_dir, "demo")),
            ("unpod", lambda: do_unpod(lab_dir, "demo")),
        ]
        for step, run in steps:
            say(f"demo: {step}")
            try:
                run()
            except click.ClickException as exc:
                failures.append(exc.format_message())
                click.echo(f"railyard-sim: {exc.format_message()}", err=True)
                if step == "pod":
                    break
    except click.ClickException as exc:
        failures.append(exc.format_message())
        click.echo(f"railyard-sim: {exc.format_message()}", err=True)
    finally:
        try:
            do_down(lab_dir)
        except click.ClickException as exc:
            failures.append(exc.format_message())
            click.echo(f"railyard-sim: {exc.format_message()}", err=True)
    elapsed = time.monotonic() - started
    if failures:
        click.echo(f"demo FAILED ({len(failures)} step(s), {elapsed:.1f}s)", err=True)
        sys.exit(1)
    click.echo(f"demo passed in {elapsed:.1f}s")


@main.command()
@lab_option
@click.option("--listen", default="127.0.0.1:9435", show_default=True)
def exporter(lab_dir: Path, listen: str) -> None:
    """Serve railyard-exporter on the lab: the production collector with the
    lab's fake sysfs and simulated netdev counters injected."""
    need_root()
    from cni.exporter.cli import run, setup_logging
    from railyard_sim.counters import sim_collector

    setup_logging("INFO")
    run(sim_collector(_load(lab_dir)).render, listen)


@main.group()
def counters() -> None:
    """The simulated RDMA counters of a pod's NICs."""


@counters.command("bump")
@lab_option
@click.argument("name")
@click.argument("ifname")
@click.argument("counter")
@click.option("--by", default=1, show_default=True, type=int)
def counters_bump(lab_dir: Path, name: str, ifname: str, counter: str, by: int) -> None:
    """Add to COUNTER of pod NAME's NIC IFNAME: an RDMA hw counter (e.g.
    out_of_sequence) or an ethtool statistic (e.g. rx_prio3_discards)."""
    need_root()
    from railyard_sim.counters import bump

    lab = _load(lab_dir)
    try:
        pod = pods.load(lab, name)
    except LabError as exc:
        raise Failed(str(exc)) from exc
    nic = next((n for n in pod.nics if n.ifname == ifname), None)
    if nic is None:
        raise Failed(f"pod {name} has no NIC {ifname}")
    value = bump(lab, nic.pci, pod.netns_path, ifname, counter, by)
    click.echo(f"{name} {ifname} {counter} = {value}")


if __name__ == "__main__":
    main()
