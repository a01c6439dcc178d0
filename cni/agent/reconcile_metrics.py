# SPDX-License-Identifier: Apache-2.0
"""The node reconcile's metrics: counted where the passes run, served on the
agent's ``/metrics``.

A pass runs in a process of its own (``cni.agent.reconcile``) and the agent's
``/metrics`` is served by another (the metrics sidecar), so the counts travel
through one small JSON file under the state dir, replaced atomically after
every repair and at the end of every pass: a pass killed half-way loses at
most the repair it was making, and the counters survive restarts of either
process (monotonic, as Prometheus wants counters). ``ReconcileCollector``
reads that file at each scrape onto a prometheus_client registry.

Families:

- ``railyard_reconcile_repairs_total{what}``: attachments finished without
  a DEL, by what gave them away (``netns-gone``, ``vf-in-host``,
  ``sandbox-gone``);
- ``railyard_reconcile_failures_total{what}``: repairs that failed (retried
  at the next pass);
- ``railyard_reconcile_ipamd_released_total``: addresses ipamd released on
  this node's account (``ReconcileNode``);
- ``railyard_reconcile_last_pass_timestamp_seconds`` and
  ``railyard_reconcile_last_pass_duration_seconds``.

Standard library at import; prometheus_client where the collector is built.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

#: The file under the plugins' state dir.
STATS_FILE = Path("reconcile") / "stats.json"


@dataclass(slots=True)
class ReconcileStats:
    repairs: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    ipamd_released: int = 0
    last_pass_timestamp: float = 0.0
    last_pass_seconds: float = 0.0

    @classmethod
    def load(cls, path: Path) -> ReconcileStats:
        """The counts so far (zero when there is no readable file yet)."""
        try:
            data: Any = json.loads(path.read_bytes())
            return cls(
                repairs={str(k): int(v) for k, v in data["repairs"].items()},
                failures={str(k): int(v) for k, v in data["failures"].items()},
                ipamd_released=int(data["ipamd_released"]),
                last_pass_timestamp=float(data["last_pass_timestamp"]),
                last_pass_seconds=float(data["last_pass_seconds"]),
            )
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return cls()

    def save(self, path: Path) -> None:
        """Replace the file atomically (a reader sees the old or the new)."""
        replace_file(path, json.dumps(asdict(self), sort_keys=True))


def replace_file(path: Path, text: str) -> None:
    """Write ``path`` through a temp file renamed over it; the temp files of
    writers killed half-way (a pass's SIGKILL) are swept first."""
    from cni.state.cache import sweep_temps

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    sweep_temps(path.parent, path.name)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-reconcile.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class ReconcileCollector:
    """A prometheus_client collector over the stats file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = ReconcileStats.load(self.path)
        for name, doc, counts in (
            (
                "railyard_reconcile_repairs",
                "Attachments the node agent finished without a DEL, by what gave "
                "them away.",
                stats.repairs,
            ),
            (
                "railyard_reconcile_failures",
                "Repairs that failed; the next pass tries again.",
                stats.failures,
            ),
        ):
            family = CounterMetricFamily(name, doc, labels=["what"])
            for what, value in sorted(counts.items()):
                family.add_metric([what], value)
            yield family
        yield CounterMetricFamily(
            "railyard_reconcile_ipamd_released",
            "Addresses ipamd released on this node's account of its attachments.",
            value=stats.ipamd_released,
        )
        yield GaugeMetricFamily(
            "railyard_reconcile_last_pass_timestamp_seconds",
            "When the last reconcile pass ended (unix seconds; 0: none yet).",
            value=stats.last_pass_timestamp,
        )
        yield GaugeMetricFamily(
            "railyard_reconcile_last_pass_duration_seconds",
            "How long the last reconcile pass took.",
            value=stats.last_pass_seconds,
        )


def registry(state_dir: Path) -> CollectorRegistry:
    """A registry holding the reconcile families of ``state_dir``'s stats."""
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(ReconcileCollector(Path(state_dir) / STATS_FILE))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    """The registry in the text exposition format."""
    from prometheus_client import generate_latest

    return bytes(generate_latest(reg))
