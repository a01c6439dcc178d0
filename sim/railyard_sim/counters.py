# SPDX-License-Identifier: Apache-2.0
"""RDMA counters on the simulated host, and the exporter wired to them.

The lab has no RDMA hardware, so its counters are made to move the way a
ConnectX's do:

- RDMA ``hw_counters``: files in the fake sysfs tree (the real
  ``SysfsRdmaStats`` reads them), all of Spiderpool's 29 plus one mlx5
  counter beyond its list, zero until a test bumps them (``bump``).
- the mlx5 ethtool ``*_vport_rdma_*`` statistics: derived from the real
  kernel statistics of the VF stand-in (the veth, read over rtnetlink in the
  netns it is in), so a ping through the rail makes ``rx/tx_vport_rdma_
  unicast_bytes`` grow; per-priority pause/discard counters start at zero
  and can be bumped. The real ethtool ioctl still reads the veth (its link
  speed is the exported ``vport_speed_mbps``).

``sim_collector`` builds the production collector with these sources
injected; ``railyard-sim exporter`` serves it. The exporter has no branch for
the simulator.

Imports: the standard library, pyroute2, ``cni.exporter``, ``cni.kernel.netns``
and ``railyard_sim``.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cni.exporter import names
from cni.exporter.collector import RdmaCollector
from cni.exporter.server import build_collector
from cni.kernel import KernelError
from cni.kernel.netns import in_netns
from cni.kernel.stats import NetdevStats, NetdevStatsSource, SysfsRdmaStats
from railyard_sim.lab import Lab
from railyard_sim.pci_tree import PciTree

NODE_NAME = "railyard-sim"
BUMPS = "ethtool-bumps.json"
#: A real mlx5 hw counter Spiderpool's list lacks: exported all the same.
EXTRA_HW_COUNTERS = ("req_rnr_retries_exceeded",)
PRIORITIES = range(8)
PF_TCLASS = 106  # a common RoCE traffic class (DSCP 26 << 2 | ECN)


def _guid(lab: Lab, rail: int, index: int) -> str:
    raw = bytes.fromhex(lab.id.rjust(4, "0")[-4:])
    octets = [0xB8, 0x3F, raw[0], raw[1], rail, 0, (index >> 8) & 0xFF, index & 0xFF]
    return ":".join(f"{octets[i]:02x}{octets[i + 1]:02x}" for i in range(0, 8, 2))


def _write_missing(path: Path, text: str) -> None:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def ensure_hw_counters(lab: Lab) -> None:
    """Give every RDMA device of the fake tree its GUIDs and counter files
    (existing files keep their values). PF: node GUID = system image GUID."""
    tree = PciTree(lab.sys_root)
    for rail in lab.rails:
        image = _guid(lab, rail.number, 0xFFFF)
        functions = [(rail.pf_pci, image)]
        functions += [(v.pci, _guid(lab, rail.number, v.index)) for v in rail.vfs]
        for pci, node in functions:
            base = tree.device(pci) / "infiniband"
            devices = sorted(base.iterdir()) if base.is_dir() else []
            for dev in devices:
                _write_missing(dev / "node_guid", node + "\n")
                _write_missing(dev / "sys_image_guid", image + "\n")
                counters = dev / "ports" / "1" / "hw_counters"
                for name in (*names.HW_COUNTERS, *EXTRA_HW_COUNTERS):
                    _write_missing(counters / name, "0\n")
                _write_missing(counters / "lifespan", "10\n")
                if pci == rail.pf_pci:
                    _write_missing(
                        dev / "tc" / "1" / "traffic_class",
                        f"Global tclass={PF_TCLASS}\n",
                    )


def rdma_counter_file(lab: Lab, pci: str, counter: str) -> Path:
    """The fake ``hw_counters`` file of ``counter`` on the RDMA device of ``pci``
    (KeyError when the function has none)."""
    base = PciTree(lab.sys_root).device(pci) / "infiniband"
    devices = sorted(base.iterdir()) if base.is_dir() else []
    if not devices:
        raise KeyError(f"function {pci} has no RDMA device in the lab")
    return devices[0] / "ports" / "1" / "hw_counters" / counter


@contextmanager
def _bumps(lab_dir: Path) -> Iterator[dict[str, Any]]:
    path = lab_dir / BUMPS
    with open(lab_dir / f".{BUMPS}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        yield data
        tmp = path.with_name(f".{BUMPS}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)


def _netdev_key(netns: str | None, ifname: str) -> str:
    return f"{netns or 'host'}:{ifname}"


def bump(
    lab: Lab, pci: str, netns: str | None, ifname: str, counter: str, by: int = 1
) -> int:
    """Add ``by`` to a counter of a NIC: an RDMA hw counter of its device, or an
    ethtool statistic (e.g. ``rx_prio3_discards``) of its netdev ``ifname`` in
    ``netns``. Returns the new value (of the hw counter, or the bump total)."""
    ensure_hw_counters(lab)
    try:
        path: Path | None = rdma_counter_file(lab, pci, counter)
    except KeyError:
        path = None  # no RDMA device: only its netdev's statistics
    if path is not None and path.exists():
        with open(path, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            value = int(f.read().strip() or 0) + by
            f.seek(0)
            f.truncate()
            f.write(f"{value}\n")
        return value
    with _bumps(lab.dir) as data:
        stats = data.setdefault(_netdev_key(netns, ifname), {})
        stats[counter] = int(stats.get(counter, 0)) + by
        return int(stats[counter])


def _link_stats(netns: str | None, ifnames: Sequence[str]) -> dict[str, dict[str, int]]:
    from pyroute2 import IPRoute

    out: dict[str, dict[str, int]] = {}
    with in_netns(netns):
        with IPRoute() as ipr:
            for link in ipr.get_links():
                name = link.get_attr("IFLA_IFNAME")
                stats = link.get_attr("IFLA_STATS64")
                if name in ifnames and stats is not None:
                    out[name] = {k: int(v) for k, v in stats.items()}
    return out


class SimNetdevStats:
    """``NetdevStatsSource`` of the lab: the real ethtool ioctl on the veth
    (speed, its own few stats) plus mlx5-like vport and priority statistics
    derived from the veth's kernel counters and the lab's bumps."""

    def __init__(self, lab_dir: Path, ethtool: NetdevStatsSource) -> None:
        self.lab_dir = lab_dir
        self.ethtool = ethtool

    def read(self, netns: str | None, ifnames: Sequence[str]) -> dict[str, NetdevStats]:
        try:
            links = _link_stats(netns, ifnames)
        except (KernelError, OSError):
            return {}
        real = self.ethtool.read(netns, ifnames)
        path = self.lab_dir / BUMPS
        bumps: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        out = {}
        for ifname, link in links.items():
            stats = dict(real[ifname].stats) if ifname in real else {}
            stats.update(vport_stats(link))
            for prio in PRIORITIES:
                for d in ("rx", "tx"):
                    for kind in ("pause", "discards"):
                        stats[f"{d}_prio{prio}_{kind}"] = 0
            for name, value in bumps.get(_netdev_key(netns, ifname), {}).items():
                stats[name] = stats.get(name, 0) + int(value)
            speed = real[ifname].speed_mbps if ifname in real else None
            out[ifname] = NetdevStats(stats, speed)
        return out


def vport_stats(link: dict[str, int]) -> dict[str, int]:
    """mlx5's vport RDMA statistics from a netdev's rtnetlink counters.

    The kernel counts received multicast packets but not their bytes, nor
    transmitted multicast: those stay zero, everything else is unicast.
    """
    rx_mcast = link.get("multicast", 0)
    return {
        "rx_vport_rdma_unicast_packets": link.get("rx_packets", 0) - rx_mcast,
        "rx_vport_rdma_unicast_bytes": link.get("rx_bytes", 0),
        "rx_vport_rdma_multicast_packets": rx_mcast,
        "rx_vport_rdma_multicast_bytes": 0,
        "tx_vport_rdma_unicast_packets": link.get("tx_packets", 0),
        "tx_vport_rdma_unicast_bytes": link.get("tx_bytes", 0),
        "tx_vport_rdma_multicast_packets": 0,
        "tx_vport_rdma_multicast_bytes": 0,
    }


def sim_collector(lab: Lab) -> RdmaCollector:
    """The production collector over the lab's records, fake sysfs and
    simulated netdev statistics."""
    from cni.kernel.ethtool import EthtoolStats

    ensure_hw_counters(lab)
    return build_collector(
        state_dir=lab.dir / "state",
        node=NODE_NAME,
        sysfs_root=lab.sys_root,
        # The fake tree shows every device, wherever the recording seam says
        # it is: no RDMA netlink (this kernel has none).
        rdma=SysfsRdmaStats(lab.sys_root),
        netdev=SimNetdevStats(lab.dir, EthtoolStats()),
    )


def pod_counters(lab: Lab, namespace: str, pod: str) -> dict[str, dict[str, float]]:
    """What the exporter exports for one pod: net_dev_name -> {series: value},
    where a series is the metric name plus its ``priority`` when it has one."""
    out: dict[str, dict[str, float]] = {}
    for family in sim_collector(lab).collect():
        for sample in family.samples:
            labels = sample.labels
            if (
                labels.get("pod_name") != pod
                or labels.get("pod_namespace") != namespace
            ):
                continue
            key = sample.name
            if "priority" in labels:
                key += f"{{priority={labels['priority']}}}"
            nic = f"{labels['net_dev_name']} ({labels['ifname']})"
            out.setdefault(nic, {})[key] = sample.value
    return out


def pod_counters_text(lab: Lab, namespace: str, pod: str) -> str:
    """``railyard-sim show``'s counter section: per NIC the vport traffic, then
    every other counter that is not zero."""
    lines = [f"# RDMA counters (as railyard-exporter exports them, pod {pod})"]
    for nic, series in sorted(pod_counters(lab, namespace, pod).items()):
        lines.append(nic)
        vport = sorted(k for k in series if "_vport_rdma_" in k)
        rest = sorted(k for k in series if k not in vport and series[k])
        for key in vport + rest:
            lines.append(f"  {key:<48} {series[key]:.0f}")
    return "\n".join(lines) + "\n"


def remove_files(lab_dir: Path) -> None:
    """Forget the bumps (``railyard-sim down``)."""
    for name in (BUMPS, f".{BUMPS}.lock", f".{BUMPS}.tmp"):
        (Path(lab_dir) / name).unlink(missing_ok=True)
