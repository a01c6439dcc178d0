# SPDX-License-Identifier: Apache-2.0
"""Where a command spends its time: named steps of the request being served.

The attach and detach code marks its steps (``with timings.step("move"):``);
the agent's worker turns recording on around a request (``start``), takes
the list after it (``finish``) and sends it to the agent's metrics
(``cni.agent.metrics``). Nothing records when nobody started a request:
direct mode, tests and library use pay one global lookup per step.

A step entered twice in one request (two addresses, a retried write) is
reported once per entry; a step running in another thread (the IPAM
allocation overlapping the move) is recorded all the same: ``list.append``
is atomic, and the request waits for that thread before it ends.

Standard library only; imported by every plugin path, so it stays tiny.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from time import perf_counter
from types import TracebackType
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: Step names the attach and detach code uses (the metric's ``step`` label);
#: a fixed set, so the label's values stay bounded. ``pf_settings``: the VF's
#: settings on its PF (MAC, VLAN, rates, trust ...; ib-sriov's GUID and the
#: driver rebind it needs), set or restored; ``move``: the VF's netdev
#: into the pod (move, rename, MAC, MTU, up) or back home; ``routes``: the
#: policy routing rules and routes, added or removed; ``detection``: what an
#: ADD waits for the conflict and gateway checks beyond the routing work, and
#: the announcement; ``ipam``: each call to the IPAM (ipamd or a delegated
#: plugin); ``record_write``: each durable write or removal of a record.
PF_SETTINGS = "pf_settings"
MOVE = "move"
ADDRESSES = "addresses"
ROUTES = "routes"
DETECTION = "detection"
IPAM = "ipam"
RECORD_WRITE = "record_write"
STEPS = (PF_SETTINGS, MOVE, ADDRESSES, ROUTES, DETECTION, IPAM, RECORD_WRITE)

Recorded = list[tuple[str, float]]

_recording: Recorded | None = None


def start() -> None:
    """Record the steps of the request starting now (the agent's worker)."""
    global _recording
    _recording = []


def finish() -> Recorded:
    """The steps recorded since ``start``, in the order they ended; stops."""
    global _recording
    done, _recording = _recording or [], None
    return done


class step:  # noqa: N801 - used as ``with timings.step(...)``, like a function
    """Time the block as step ``name`` of the current request, if recording.

    A class rather than a generator-based context manager: it is entered
    ~20 times per ADD, and this costs a fraction of a microsecond."""

    __slots__ = ("_into", "_name", "_t0")

    def __init__(self, name: str) -> None:
        self._name = name
        self._into = _recording
        self._t0 = 0.0

    def __enter__(self) -> None:
        if self._into is not None:
            self._t0 = perf_counter()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._into is not None:
            self._into.append((self._name, perf_counter() - self._t0))


def timed(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A function whose every call is step ``name`` (the IPAM clients' calls,
    made from several places of ADD and DEL, and from a thread)."""

    def wrap(func: Callable[P, R]) -> Callable[P, R]:
        @wraps(func)
        def timed_call(*args: P.args, **kwargs: P.kwargs) -> R:
            with step(name):
                return func(*args, **kwargs)

        return timed_call

    return wrap
