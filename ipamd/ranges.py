# SPDX-License-Identifier: Apache-2.0
"""Integer interval arithmetic over IP addresses. Standard library only.

Pools are sets of addresses written as ranges; keeping them as sorted, merged,
inclusive ``(lo, hi)`` integer pairs makes every set operation linear in the
number of ranges, never in the number of addresses (an IPv6 /64 has 2**64).
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Iterable, Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Interval = tuple[int, int]


def parse_ip(text: str, version: int | None = None) -> IPAddress:
    """An address, optionally required to be of ``version``; ValueError else.

    A zone (``fe80::1%eth0``) is refused: it names an interface of one host,
    and the same address without it is what a pod gets.
    """
    if "%" in text:
        raise ValueError(
            f"{text.strip()} has a zone (%...): zones name interfaces, they are "
            "not part of an address"
        )
    addr = ipaddress.ip_address(text.strip())
    if version is not None and addr.version != version:
        raise ValueError(f"{text} is not an IPv{version} address")
    return addr


def parse_entry(text: str, version: int) -> Interval:
    """``"a-b"`` or ``"a"`` as an inclusive integer interval."""
    lo_s, sep, hi_s = text.partition("-")
    lo = int(parse_ip(lo_s, version))
    hi = int(parse_ip(hi_s, version)) if sep else lo
    if hi < lo:
        raise ValueError(f"invalid IP range {text}: start is after end")
    return (lo, hi)


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, with overlapping and adjacent intervals joined."""
    out: list[Interval] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def subtract(base: Sequence[Interval], cut: Sequence[Interval]) -> list[Interval]:
    """``base`` minus ``cut``; both merged."""
    out: list[Interval] = []
    j = 0
    for lo, hi in base:
        cur = lo
        while j < len(cut) and cut[j][1] < cur:
            j += 1
        k = j
        while k < len(cut) and cut[k][0] <= hi:
            c_lo, c_hi = cut[k]
            if c_lo > cur:
                out.append((cur, c_lo - 1))
            cur = max(cur, c_hi + 1)
            if cur > hi:
                break
            k += 1
        if cur <= hi:
            out.append((cur, hi))
    return out


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Common part of two merged interval lists."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def count(intervals: Iterable[Interval]) -> int:
    return sum(hi - lo + 1 for lo, hi in intervals)


def contains(intervals: Sequence[Interval], value: int) -> bool:
    """Membership by bisection on merged intervals."""
    i = bisect.bisect_right(intervals, (value, float("inf"))) - 1
    return i >= 0 and intervals[i][0] <= value <= intervals[i][1]


def to_text(intervals: Iterable[Interval], version: int) -> list[str]:
    """Spiderpool's notation: ``"a-b"`` for ranges, ``"a"`` for single IPs."""
    make = ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address
    out = []
    for lo, hi in intervals:
        out.append(str(make(lo)) if lo == hi else f"{make(lo)}-{make(hi)}")
    return out
