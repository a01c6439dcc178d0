# SPDX-License-Identifier: Apache-2.0
"""Attach latency on the agent's ``/metrics``: per CNI command and per step.

Two histograms (prometheus_client), buckets from 1 ms to 30 s, each series
with the node's ``node_name`` (as the RDMA exporter's):

- ``railyard_cni_command_duration_seconds{plugin, command, result}``: a
  command served by a worker, from the request read to the exit status
  (``result`` is ``success`` or ``error``);
- ``railyard_cni_step_duration_seconds{plugin, command, step}``: each step
  the attach and detach code marks (``cni.timings``: PF settings, move,
  addresses, routes, detection, IPAM, record writes).

How a worker's timings reach the metrics server. Requests run in worker
processes forked from the agent; ``/metrics`` is served by the agent's
sidecar, another forked process (the parent forks workers and must stay
single-threaded, so the HTTP server cannot live in it). The agent makes one
``SOCK_SEQPACKET`` unix socketpair before it forks anything (``Channel``): every
worker inherits the sending end, the sidecar reads the other in a thread and
observes the histograms. Why one message per request on a socket of its own,
not the shim's wire or the worker's control socket: the sample is the
agent's business, not the runtime's (the shim would have to send it back);
the parent would have to relay it to the sidecar (a second hop, and a parent
that must never block on it). A seqpacket send is one whole message however
many workers write, sent without blocking (``MSG_DONTWAIT``): when the
sidecar is down or behind, the socket's buffer (~200 KiB, some hundreds of
samples; a datagram socket would hold ``net.unix.max_dgram_qlen``, 10) queues
them and further ones are dropped, never the request held.
The parent keeps the reading end open, so a restarted sidecar picks up what
queued meanwhile. A command past its deadline is an ``error`` sample like any
failed one (the deadline's alarm ends it in the plugin); a worker that ends
mid-command (the deadline's hard exit when the alarm could not end it, a
crash) sends nothing: that shows in the runtime's error and the agent's log.

A sample is a small JSON document: ``{"p": plugin, "c": command, "r":
result, "d": seconds, "s": [[step, seconds], ...]}``.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cni import timings

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

#: 1 ms to 30 s: a step of a warm ADD is a millisecond or two, a detection
#: ~100 ms, a command stuck behind a lock or ipamd up to the runtime's timeout.
BUCKETS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
    1.0, 2.0, 5.0, 10.0, 30.0,
)  # fmt: skip
COMMANDS = frozenset({"ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION"})
SUCCESS, ERROR = "success", "error"
#: Bigger than any sample (a pod's worth of steps is ~1 KiB).
MAX_SAMPLE = 64 * 1024


@dataclass(frozen=True, slots=True)
class Sample:
    """One served command: what the histograms observe."""

    plugin: str
    command: str
    result: str
    seconds: float
    steps: timings.Recorded = field(default_factory=list)

    @staticmethod
    def of(plugin: str, command: str, status: int, seconds: float) -> Sample:
        """The sample of a command that ended with exit ``status``, with the
        steps recorded meanwhile; a command name no runtime sends (the
        environment is the caller's) is ``other``, so labels stay bounded."""
        return Sample(
            plugin,
            command if command in COMMANDS else "other",
            SUCCESS if status == 0 else ERROR,
            seconds,
            timings.finish(),
        )

    def encode(self) -> bytes:
        return json.dumps(
            {
                "p": self.plugin,
                "c": self.command,
                "r": self.result,
                "d": self.seconds,
                "s": self.steps,
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def decode(data: bytes) -> Sample:
        """The sample in ``data``; ValueError when it is not one."""
        try:
            doc = json.loads(data)
            steps = [(str(name), float(sec)) for name, sec in doc["s"]]
            return Sample(
                str(doc["p"]), str(doc["c"]), str(doc["r"]), float(doc["d"]), steps
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a sample: {exc}") from None


class AttachMetrics:
    """The two histograms of node ``node``, on ``registry``."""

    def __init__(self, registry: CollectorRegistry, node: str) -> None:
        from prometheus_client import Histogram

        self.node = node
        self.commands = Histogram(
            "railyard_cni_command_duration_seconds",
            "CNI commands served by railyard-agent, from the request to the "
            "exit status, by plugin, command and result (success or error)",
            ["node_name", "plugin", "command", "result"],
            buckets=BUCKETS,
            registry=registry,
        )
        self.steps = Histogram(
            "railyard_cni_step_duration_seconds",
            "Steps of the CNI commands served by railyard-agent (pf_settings, "
            "move, addresses, routes, detection, ipam, record_write)",
            ["node_name", "plugin", "command", "step"],
            buckets=BUCKETS,
            registry=registry,
        )

    def observe(self, sample: Sample) -> None:
        labels = (self.node, sample.plugin, sample.command)
        self.commands.labels(*labels, sample.result).observe(sample.seconds)
        for name, seconds in sample.steps:
            if name in timings.STEPS:
                self.steps.labels(*labels, name).observe(seconds)


class Channel:
    """Workers -> the metrics sidecar: a seqpacket socketpair made before the
    agent forks (see the module docstring)."""

    def __init__(self) -> None:
        self._reader, self._writer = socket.socketpair(
            socket.AF_UNIX, socket.SOCK_SEQPACKET
        )
        self.dropped = 0

    def start_request(self) -> None:
        """In a worker, before the plugin runs: record its steps."""
        timings.start()

    def send(self, sample: Sample) -> None:
        """In a worker, after the command: never blocks, never raises."""
        try:
            self._writer.send(sample.encode(), socket.MSG_DONTWAIT)
        except OSError as exc:  # full (the sidecar is behind or down), closed
            self.dropped += 1
            log.debug("attach-latency sample dropped: %s", exc)

    def receive_forever(self, observe: Callable[[Sample], None]) -> None:
        """In the sidecar: observe every sample that comes, until closed."""
        while True:
            try:
                data = self._reader.recv(MAX_SAMPLE)
            except OSError:
                return
            if not data:
                return
            try:
                observe(Sample.decode(data))
            except ValueError as exc:  # only our workers can write here
                log.warning("attach-latency: %s", exc)

    def serve_in_thread(self, metrics: AttachMetrics) -> threading.Thread:
        """The sidecar's reader thread (a daemon: it ends with the sidecar)."""
        thread = threading.Thread(
            target=self.receive_forever,
            args=(metrics.observe,),
            name="attach-latency",
            daemon=True,
        )
        thread.start()
        return thread

    def close(self) -> None:
        self._reader.close()
        self._writer.close()


Render = Callable[[], bytes]


def renderer(channel: Channel, node: str) -> Render:
    """In the sidecar: node ``node``'s attach-latency histograms, fed by
    ``channel``, as a ``/metrics`` text part."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=True)
    channel.serve_in_thread(AttachMetrics(registry, node))
    return lambda: generate_latest(registry)


def serve(
    listen: str, channel: Channel, node: str, before: Sequence[Render] = ()
) -> None:
    """The sidecar's body: ``/metrics`` on ``listen`` with the ``before``
    parts (the RDMA exporter's), then attach latency; until SIGTERM."""
    from cni.exporter.cli import run

    parts = [*before, renderer(channel, node)]
    run(lambda: b"".join(part() for part in parts), listen)
