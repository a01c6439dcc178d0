# SPDX-License-Identifier: Apache-2.0
"""The RDMA collector: one pass over the node's RDMA devices per scrape.

A custom prometheus_client collector: every scrape reads the pods' NICs from
the attachment records and the host's PFs from sysfs, reads their counters
through the two sources, and yields metric families built for that scrape.
Nothing is registered per device, so devices that come and go cause no
registry churn (Spiderpool re-registers its instruments when a new counter
name shows up, and exports it one scrape late).

Devices: every pod NIC whose record says ADD completed and whose netns still
exists, plus each PF of the host (``is_root="true"``, no pod labels), the
series Spiderpool's cluster dashboard sums.

Imports prometheus_client; never on a plugin's import path.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cni.exporter import names
from cni.exporter.records import PodNic, pod_nics
from cni.exporter.sources import (
    NetdevStats,
    NetdevStatsSource,
    RdmaStats,
    RdmaStatsSource,
)
from cni.kernel.sysfs import Sysfs

log = logging.getLogger(__name__)

NODE_NAME_ENV = "RAILYARD_NODE_NAME"


def node_name(env: dict[str, str] | os._Environ[str] | None = None) -> str:
    """RAILYARD_NODE_NAME (the DaemonSet sets it from spec.nodeName), else the
    hostname, as Spiderpool's ``node_name`` label."""
    env = os.environ if env is None else env
    return env.get(NODE_NAME_ENV) or socket.gethostname()


@dataclass(frozen=True, slots=True)
class Device:
    """One RDMA device to export: where its netdev is and who owns it."""

    pci: str
    rdma_hint: str
    netns: str | None  # None: the host netns
    netdev: str  # "" when there is no kernel netdev (DPDK)
    parent: str
    pod_namespace: str = ""
    pod_name: str = ""


def pod_devices(nics: Iterable[PodNic]) -> list[Device]:
    """The pods' NICs whose netns still exists (a pod whose netns is gone is
    gone, even before its DEL ran)."""
    return [
        Device(
            pci=n.pci,
            rdma_hint=n.rdma_device,
            netns=n.netns,
            netdev=n.ifname if n.netdev else "",
            parent=n.parent,
            pod_namespace=n.pod_namespace,
            pod_name=n.pod_name,
        )
        for n in nics
        if n.pci and n.netns and os.path.exists(n.netns)
    ]


def host_devices(sysfs: Sysfs) -> list[Device]:
    """The PFs (SR-IOV capable functions) with their netdev in the host."""
    out = []
    for pci in sysfs.pfs():
        netdevs = sysfs.netdevs(pci)
        out.append(Device(pci, "", None, netdevs[0] if netdevs else "", ""))
    return out


class _Families:
    """The families of one scrape, created on first use."""

    def __init__(self) -> None:
        self.by_name: dict[str, CounterMetricFamily] = {}

    def add(
        self, name: str, labels: Sequence[str], values: Sequence[str], value: float
    ) -> None:
        family = self.by_name.get(name)
        if family is None:
            family = CounterMetricFamily(
                name, _HELP.get(name, f"{name} as the device reports it"), labels=labels
            )
            self.by_name[name] = family
        family.add_metric(values, value)


_HELP = {
    names.metric_name(names.SPEED): "link speed of the RDMA netdev in Mb/s "
    "(a counter with _total, as Spiderpool's dashboards query it)",
    names.metric_name(names.TOS): "traffic class of a root RDMA device "
    "(a counter with _total, as Spiderpool's dashboards query it)",
}


class RdmaCollector(Collector):
    """Collects every RDMA device of the node on each ``collect()``."""

    def __init__(
        self,
        state_dir: Path | str,
        sysfs: Sysfs,
        rdma: RdmaStatsSource,
        netdev: NetdevStatsSource,
        node: str,
        host_pfs: bool = True,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.sysfs = sysfs
        self.rdma = rdma
        self.netdev = netdev
        self.node = node
        self.host_pfs = host_pfs
        self.read_errors: dict[str, int] = {"rdma": 0, "netdev": 0}

    def describe(self) -> Iterable[Metric]:
        # Families depend on what devices report: nothing to declare up front
        # (and registering must not trigger a scrape).
        return []

    def devices(self) -> list[Device]:
        found = pod_devices(pod_nics(self.state_dir))
        if self.host_pfs:
            found.extend(host_devices(self.sysfs))
        return found

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        devices = self.devices()
        netdev_stats = self._netdev_stats(devices)
        families = _Families()
        exported = 0
        for dev in devices:
            found = self.rdma.read(dev.pci, dev.rdma_hint)
            if found is None:
                if dev.netns is not None:
                    self.read_errors["rdma"] += 1
                    log.debug("no RDMA device for %s (%s)", dev.pci, dev.netdev)
                continue
            rdma_name, stats = found
            self._add_device(
                families,
                dev,
                rdma_name,
                stats,
                netdev_stats.get((dev.netns, dev.netdev)),
            )
            exported += 1
        yield from families.by_name.values()
        yield from self._self_metrics(exported, time.perf_counter() - started)

    def _netdev_stats(
        self, devices: Sequence[Device]
    ) -> dict[tuple[str | None, str], NetdevStats]:
        by_netns: dict[str | None, list[str]] = {}
        for dev in devices:
            if dev.netdev:
                by_netns.setdefault(dev.netns, []).append(dev.netdev)
        out: dict[tuple[str | None, str], NetdevStats] = {}
        for netns, ifnames in by_netns.items():
            read = self.netdev.read(netns, ifnames)
            self.read_errors["netdev"] += len(set(ifnames) - set(read))
            for ifname, stats in read.items():
                out[(netns, ifname)] = stats
        return out

    def _add_device(
        self,
        families: _Families,
        dev: Device,
        rdma_name: str,
        stats: RdmaStats,
        netdev: NetdevStats | None,
    ) -> None:
        labels = names.DEVICE_LABELS
        values = (
            self.node,
            rdma_name,
            dev.netdev,
            stats.node_guid,
            stats.sys_image_guid,
            "true" if stats.is_root else "false",
            dev.parent,
            dev.pod_namespace,
            dev.pod_name,
        )
        for counter, value in stats.counters.items():
            families.add(names.metric_name(counter), labels, values, value)
        if stats.tos is not None:
            families.add(
                names.metric_name(names.TOS),
                names.TOS_LABELS,
                values[:3],
                stats.tos,
            )
        if netdev is None:
            return
        for stat, value in netdev.stats.items():
            prio = names.PRIORITY_STAT.match(stat)
            if prio is not None:
                direction, priority, kind = prio.groups()
                families.add(
                    names.metric_name(f"{direction}_{kind}"),
                    names.PRIORITY_LABELS,
                    (*values, priority),
                    value,
                )
            elif "vport" in stat:
                families.add(names.metric_name(stat), labels, values, value)
        if netdev.speed_mbps is not None:
            families.add(
                names.metric_name(names.SPEED), labels, values, netdev.speed_mbps
            )

    def _self_metrics(self, devices: int, seconds: float) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            names.SCRAPE_DURATION,
            "wall time of the last collection of RDMA counters",
            value=seconds,
        )
        yield GaugeMetricFamily(
            names.DEVICES, "RDMA devices exported by the last collection", value=devices
        )
        errors = CounterMetricFamily(
            names.READ_ERRORS,
            "devices whose counters could not be read, by source",
            labels=["source"],
        )
        for source, count in sorted(self.read_errors.items()):
            errors.add_metric([source], count)
        yield errors
