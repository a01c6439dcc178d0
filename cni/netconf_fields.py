# SPDX-License-Identifier: Apache-2.0
"""Validators of single netconf values: hardware addresses, keys and rates.

Standard library and ``cni.errors`` only, so every plugin's config module can
use them before anything heavy is loaded. Each returns the normalised value or
raises CniError 7 (invalid config) naming the field and the allowed form or
range.

Patterns are matched whole (``re.fullmatch``): ``$`` would also match before a
trailing newline, and ``"02:00:00:00:00:01\\n"`` would reach the kernel.
"""

from __future__ import annotations

import re

from cni.errors import INVALID_CONFIG, CniError

_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
_GUID = re.compile(r"([0-9a-fA-F]{2}:){7}[0-9a-fA-F]{2}")
_PKEY = re.compile(r"(0[xX])?[0-9a-fA-F]{1,4}")

#: IFLA_VF_RATE carries min/max_tx_rate as unsigned 32-bit Mbps.
MAX_TX_RATE = 2**32 - 1
#: A partition key is 15 bits; the 16th (full membership) is the SM's.
MAX_PKEY = 0x7FFF


def _shown(value: str) -> str:
    """The value as the peers print it, quoted with escapes visible when it
    holds anything unprintable, and cut short for a log line."""
    text = value if value.isprintable() else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def mac(value: str, field: str = "mac") -> str:
    """An Ethernet MAC as lower-case colon hex."""
    if not _MAC.fullmatch(value):
        raise CniError(
            INVALID_CONFIG,
            f"failed to parse MAC address {_shown(value)}",
            f"{field}: expected six colon-separated hex bytes, xx:xx:xx:xx:xx:xx",
        )
    return value.lower()


def guid(value: str, field: str = "guid") -> str:
    """An InfiniBand GUID: 8 bytes of colon hex, not all zero; lower-cased."""
    if not _GUID.fullmatch(value) or all(b == "00" for b in value.split(":")):
        raise CniError(
            INVALID_CONFIG,
            f"invalid guid {_shown(value)}",
            f"{field}: expected 8 bytes of colon-separated hex, not all zero "
            "(e.g. 02:00:00:00:00:00:00:01)",
        )
    return value.lower()


def pkey(value: str, field: str = "pkey") -> str:
    """A 15-bit partition key as ``0x%04x``; "" stays "" (no pkey)."""
    if value == "":
        return ""
    if not _PKEY.fullmatch(value):
        raise CniError(
            INVALID_CONFIG,
            f"invalid pkey {_shown(value)}",
            f"{field}: expected a hex partition key, with or without 0x (e.g. 0x7fff)",
        )
    number = int(value, 16)
    if not 0 < number <= MAX_PKEY:
        raise CniError(
            INVALID_CONFIG,
            f"invalid pkey {_shown(value)}",
            f"{field}: a partition key is 15 bits: 0x0001-0x{MAX_PKEY:04x} (the "
            "membership bit is set by the subnet manager)",
        )
    return f"0x{number:04x}"


def tx_rate(value: int | None, field: str) -> int | None:
    """``min_tx_rate``/``max_tx_rate`` in Mbps: 0 (no limit) to 2**32-1."""
    if value is None:
        return None
    if not 0 <= value <= MAX_TX_RATE:
        # str() of a huge int is slow and, past 4300 digits, refused.
        bits = value.bit_length()
        shown = str(value) if bits <= 64 else f"(a {bits}-bit number)"
        raise CniError(
            INVALID_CONFIG,
            f"{field} {shown} invalid: must be 0-{MAX_TX_RATE} Mbps",
            f"{field}: the VF rate limit is an unsigned 32-bit number of Mbps "
            "(0 means no limit)",
        )
    return value
