# SPDX-License-Identifier: Apache-2.0
"""FreeIndex: first free address of a pool in O(log n), whatever its fill.

Standard library only. Spiderpool scans the pool's ranges for the first
address not in use, which costs O(pool size) at high fill. We keep instead,
per pool, a min-heap of free *intervals* (built once from the used set at
start or after a pool edit): taking the lowest free address pops the lowest
interval and pushes back its remainder; a release pushes a one-address
interval. The result is the same first-free-in-range-order choice, at a cost
that does not grow with the pool (a /16 at 99% costs what it costs at 1%, and
an IPv6 /64 is just two integers).

Addresses taken out of order (requested IPs, sticky pods) are recorded in the
used set; intervals that still cover them skip them lazily when reached.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from ipamd import ranges
from ipamd.ranges import Interval


class FreeIndex:
    def __init__(self, usable: Sequence[Interval], used: Iterable[int] = ()) -> None:
        self._usable = list(usable)
        self._used: set[int] = set(used)
        self._total = ranges.count(self._usable)
        self._used_inside = sum(
            1 for v in self._used if ranges.contains(self._usable, v)
        )
        free = ranges.subtract(self._usable, ranges.merge((v, v) for v in self._used))
        self._heap: list[list[int]] = [[lo, hi] for lo, hi in free]
        heapq.heapify(self._heap)

    @property
    def total(self) -> int:
        """Addresses the pool may hand out (ips - excludeIPs - reserved)."""
        return self._total

    @property
    def used(self) -> frozenset[int]:
        return frozenset(self._used)

    @property
    def used_count(self) -> int:
        return len(self._used)

    @property
    def free_count(self) -> int:
        return self._total - self._used_inside

    def is_used(self, value: int) -> bool:
        return value in self._used

    def usable_has(self, value: int) -> bool:
        """Whether the pool may hand ``value`` out at all (used or not)."""
        return ranges.contains(self._usable, value)

    def can_take(self, value: int) -> bool:
        return value not in self._used and ranges.contains(self._usable, value)

    def take(self) -> int | None:
        """The lowest free address, now marked used; None when exhausted."""
        heap = self._heap
        used = self._used
        while heap:
            top = heap[0]
            lo, hi = top
            while lo <= hi and lo in used:
                lo += 1
            if lo > hi:
                heapq.heappop(heap)
                continue
            if lo == hi:
                heapq.heappop(heap)
            else:
                # Raising the smallest key keeps the heap valid only after a
                # sift; heapreplace does pop+push in one O(log n) step.
                heapq.heapreplace(heap, [lo + 1, hi])
            used.add(lo)
            self._used_inside += 1
            return lo
        return None

    def take_specific(self, value: int) -> bool:
        """Mark ``value`` used if it is free and usable; False otherwise."""
        if not self.can_take(value):
            return False
        self._used.add(value)
        self._used_inside += 1
        return True

    def mark_used(self, value: int) -> None:
        """Record an address held although outside the usable set (an address
        reserved or excluded after it was allocated stays until released)."""
        if value in self._used:
            return
        self._used.add(value)
        if ranges.contains(self._usable, value):
            self._used_inside += 1

    def release(self, value: int) -> None:
        if value not in self._used:
            return
        self._used.discard(value)
        if ranges.contains(self._usable, value):
            self._used_inside -= 1
            heapq.heappush(self._heap, [value, value])
