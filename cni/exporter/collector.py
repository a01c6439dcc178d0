# SPDX-License-Identifier: Apache-2.0
"""The RDMA collector: one pass over the node's RDMA devices per scrape.

A custom prometheus_client collector: every scrape reads the pods' NICs from
the attachment records and the host's PFs from sysfs, reads their counters
through the two sources, and yields metric families built for that scrape
(``collect``, for any registry), or renders them straight to the text format
(``render``, what ``railyard-exporter`` serves: per device, not per label).
Nothing is registered per device, so devices that come and go cause no
registry churn (Spiderpool re-registers its instruments when a new counter
name shows up, and exports it one scrape late).

Devices: every pod NIC whose record has the VF in the pod and whose netns
still exists, plus each PF of the host (``is_root="true"``, no pod labels), the
series Spiderpool's cluster dashboard sums.

Imports prometheus_client; never on a plugin's import path.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cni.exporter import names
from cni.exporter.owners import NO_OWNER, Owner, OwnerLabels
from cni.exporter.records import PodNic, pod_nics
from cni.kernel.stats import (
    NetdevStats,
    NetdevStatsSource,
    RdmaStats,
    RdmaStatsSource,
)
from cni.kernel.sysfs import Sysfs

log = logging.getLogger(__name__)

NODE_NAME_ENV = "RAILYARD_NODE_NAME"


def node_name(env: Mapping[str, str] | None = None) -> str:
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


def _escape(value: str) -> str:
    """A label value as the text exposition format quotes it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(label_names: Sequence[str], values: Sequence[str]) -> str:
    return ",".join(
        f'{n}="{_escape(v)}"' for n, v in zip(label_names, values, strict=True)
    )


@dataclass(slots=True)
class DeviceLabels:
    """One device's label values, and the same rendered once per scrape (the
    text of ~45 series per device is built from it, not label by label)."""

    values: tuple[str, ...]  # names.DEVICE_LABELS order
    text: str
    tos_text: str

    @classmethod
    def of(cls, values: tuple[str, ...]) -> DeviceLabels:
        tos = values[: len(names.TOS_LABELS)]
        return cls(
            values,
            _label_text(names.DEVICE_LABELS, values),
            _label_text(names.TOS_LABELS, tos),
        )


#: The three label sets a family can have.
DEVICE, PRIORITY, TOS = "device", "priority", "tos"


@dataclass(slots=True)
class Family:
    """One counter family of a scrape: rows of (device, priority, value)."""

    name: str  # without _total
    kind: str
    rows: list[tuple[DeviceLabels, str, float]]

    @property
    def help(self) -> str:
        return _HELP.get(self.name, f"{self.name} as the device reports it")

    def label_names(self) -> tuple[str, ...]:
        if self.kind == TOS:
            return names.TOS_LABELS
        return names.PRIORITY_LABELS if self.kind == PRIORITY else names.DEVICE_LABELS

    def to_metric(self) -> CounterMetricFamily:
        """The family as prometheus_client objects (the registry path)."""
        family = CounterMetricFamily(self.name, self.help, labels=self.label_names())
        for dev, prio, value in self.rows:
            if self.kind == TOS:
                family.add_metric(dev.values[: len(names.TOS_LABELS)], value)
            elif self.kind == PRIORITY:
                family.add_metric((*dev.values, prio), value)
            else:
                family.add_metric(dev.values, value)
        return family

    def render(self, out: list[str]) -> None:
        """The family in the text exposition format (version 0.0.4)."""
        total = f"{self.name}_total"
        out.append(f"# HELP {total} {self.help}\n# TYPE {total} counter\n")
        for dev, prio, value in self.rows:
            if self.kind == TOS:
                labels = dev.tos_text
            elif self.kind == PRIORITY:
                labels = f'{dev.text},priority="{prio}"'
            else:
                labels = dev.text
            out.append(f"{total}{{{labels}}} {_number(value)}\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass(slots=True)
class Scrape:
    """Everything one collection found."""

    families: dict[str, Family]
    devices: int
    seconds: float
    read_errors: dict[str, int]

    def add(
        self, name: str, kind: str, dev: DeviceLabels, value: float, prio: str = ""
    ) -> None:
        family = self.families.get(name)
        if family is None:
            family = self.families[name] = Family(name, kind, [])
        family.rows.append((dev, prio, value))


_HELP = {
    names.metric_name(names.SPEED): "link speed of the RDMA netdev in Mb/s "
    "(a counter with _total, as Spiderpool's dashboards query it)",
    names.metric_name(names.TOS): "traffic class of a root RDMA device "
    "(a counter with _total, as Spiderpool's dashboards query it)",
}
_SELF_HELP = {
    names.SCRAPE_DURATION: "wall time of the last collection of RDMA counters",
    names.DEVICES: "RDMA devices exported by the last collection",
    names.READ_ERRORS: "devices whose counters could not be read, by source",
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
        owners: OwnerLabels | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.owners = owners
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

    def scrape(self) -> Scrape:
        """Read every device once."""
        started = time.perf_counter()
        devices = self.devices()
        owner_of = self._owners(devices)
        netdev_stats = self._netdev_stats(devices)
        scrape = Scrape({}, 0, 0.0, self.read_errors)
        for dev in devices:
            found = self.rdma.read(dev.pci, dev.rdma_hint, dev.netns)
            if found is None:
                if dev.netns is not None:
                    self.read_errors["rdma"] += 1
                    log.debug("no RDMA device for %s (%s)", dev.pci, dev.netdev)
                continue
            rdma_name, stats = found
            netdev = netdev_stats.get((dev.netns, dev.netdev))
            owner = owner_of.get((dev.pod_namespace, dev.pod_name), NO_OWNER)
            self._add_device(scrape, dev, rdma_name, stats, netdev, owner)
            scrape.devices += 1
        scrape.seconds = time.perf_counter() - started
        return scrape

    def collect(self) -> Iterator[Metric]:
        """The prometheus_client protocol: mount it on any registry."""
        scrape = self.scrape()
        for family in scrape.families.values():
            yield family.to_metric()
        yield GaugeMetricFamily(
            names.SCRAPE_DURATION,
            _SELF_HELP[names.SCRAPE_DURATION],
            value=scrape.seconds,
        )
        yield GaugeMetricFamily(
            names.DEVICES, _SELF_HELP[names.DEVICES], value=scrape.devices
        )
        errors = CounterMetricFamily(
            names.READ_ERRORS, _SELF_HELP[names.READ_ERRORS], labels=["source"]
        )
        for source, count in sorted(scrape.read_errors.items()):
            errors.add_metric([source], count)
        yield errors

    def render(self) -> bytes:
        """One scrape in the text exposition format, built per device rather
        than per label: the same series as ``collect`` at a third of the CPU
        of prometheus_client's generic ``generate_latest``."""
        scrape = self.scrape()
        out: list[str] = []
        for family in scrape.families.values():
            family.render(out)
        for name, value in (
            (names.SCRAPE_DURATION, scrape.seconds),
            (names.DEVICES, scrape.devices),
        ):
            out.append(
                f"# HELP {name} {_SELF_HELP[name]}\n# TYPE {name} gauge\n"
                f"{name} {_number(value)}\n"
            )
        errors = f"{names.READ_ERRORS}_total"
        out.append(
            f"# HELP {errors} {_SELF_HELP[names.READ_ERRORS]}\n"
            f"# TYPE {errors} counter\n"
        )
        for source, count in sorted(scrape.read_errors.items()):
            out.append(f'{errors}{{source="{source}"}} {count}\n')
        return "".join(out).encode()

    def _owners(self, devices: Sequence[Device]) -> dict[tuple[str, str], Owner]:
        """The owner of each pod seen (from the cache: a scrape never waits
        for the API); pods gone from the node are forgotten."""
        if self.owners is None:
            return {}
        pods = {(d.pod_namespace, d.pod_name) for d in devices if d.pod_name}
        self.owners.retain(pods)
        return {pod: self.owners.lookup(*pod) for pod in pods}

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
        scrape: Scrape,
        dev: Device,
        rdma_name: str,
        stats: RdmaStats,
        netdev: NetdevStats | None,
        owner: Owner,
    ) -> None:
        labels = DeviceLabels.of(
            (
                self.node,
                rdma_name,
                dev.netdev,
                stats.node_guid,
                stats.sys_image_guid,
                "true" if stats.is_root else "false",
                dev.parent,
                dev.pod_namespace,
                dev.pod_name,
                *owner.labels(),
            )
        )
        metric_name = names.metric_name
        for counter, value in stats.counters.items():
            scrape.add(metric_name(counter), DEVICE, labels, value)
        if stats.tos is not None:
            scrape.add(metric_name(names.TOS), TOS, labels, stats.tos)
        if netdev is None:
            return
        for stat, value in netdev.stats.items():
            if "_prio" in stat:
                prio = names.PRIORITY_STAT.match(stat)
                if prio is not None:
                    direction, priority, kind = prio.groups()
                    name = metric_name(f"{direction}_{kind}")
                    scrape.add(name, PRIORITY, labels, value, priority)
                    continue
            if "vport" in stat:
                scrape.add(metric_name(stat), DEVICE, labels, value)
        if netdev.speed_mbps is not None:
            scrape.add(metric_name(names.SPEED), DEVICE, labels, netdev.speed_mbps)
