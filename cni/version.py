# SPDX-License-Identifier: Apache-2.0
"""CNI spec versions: the supported list, parsing, comparison, reconciliation.

Mirrors containernetworking/cni ``pkg/version`` (``ParseVersion``,
``GreaterThanOrEqualTo``, ``Reconciler.CheckRaw``, ``ConfigDecoder``) so error
texts match what runtimes already log for the Go plugins.

Imports only the standard library and ``cni.errors``: VERSION must stay cheap.

Policy: the plugins speak 0.3.0 .. 1.1.0 (``ALL``). 0.1.0/0.2.0 results
(``ip4``/``ip6`` objects) are still *read* by ``cni.types.Result.from_json`` so
an old prevResult can be consumed, but a config asking for them is rejected
with code 1, like a Go plugin built with ``version.PluginSupports`` >= 0.3.0.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from cni.errors import DECODE_FAILURE, INCOMPATIBLE_VERSION, CniError

#: Every version this library can write a result for, oldest first.
ALL: tuple[str, ...] = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
#: Versions ``cni.types.Result.from_json`` can read (prevResult, IPAM output).
READABLE: tuple[str, ...] = ("0.1.0", "0.2.0", *ALL)
#: The spec version this library implements (what VERSION reports).
CURRENT = "1.1.0"
#: First version with CHECK, and first with GC/STATUS (SPEC.md "Operations").
CHECK_SINCE = "0.4.0"
GC_SINCE = "1.1.0"
STATUS_SINCE = "1.1.0"

Version = tuple[int, int, int]


def parse(version: str) -> Version:
    """``"1.0.0"`` -> ``(1, 0, 0)``; ``""`` is 0.1.0 (an undeclared version).

    Raises ValueError with Go's messages for malformed versions.
    """
    if version == "":
        return (0, 1, 0)
    parts = version.split(".")
    if len(parts) >= 4:
        raise ValueError(f"invalid version {version!r}: too many parts")
    nums = [0, 0, 0]
    for i, (label, part) in enumerate(
        zip(("major", "minor", "micro"), parts, strict=False)
    ):
        # Go's strconv.Atoi: optional sign then ASCII digits only.
        body = part[1:] if part[:1] in "+-" and len(part) > 1 else part
        if not body.isascii() or not body.isdigit():
            raise ValueError(f"failed to convert {label} version part {part!r}")
        nums[i] = int(part)
    return (nums[0], nums[1], nums[2])


def greater_than_or_equal(version: str, other: str) -> bool:
    """``version >= other`` (Go ``version.GreaterThanOrEqualTo``)."""
    return parse(version) >= parse(other)


def is_supported(version: str, supported: Sequence[str] = ALL) -> bool:
    """Exact-string membership, as Go's ``Reconciler.CheckRaw`` does."""
    return version in supported


def go_quote_list(items: Iterable[str]) -> str:
    """Render a list like Go's ``%q`` of a ``[]string``: ``["a" "b"]``."""
    return "[" + " ".join(json.dumps(i) for i in items) + "]"


def check_compatible(config_version: str, supported: Sequence[str] = ALL) -> None:
    """Raise code 1 ``incompatible CNI versions`` unless supported (Go skel)."""
    if config_version not in supported:
        raise CniError(
            INCOMPATIBLE_VERSION,
            "incompatible CNI versions",
            f"config is {json.dumps(config_version)}, "
            f"plugin supports {go_quote_list(supported)}",
        )


def config_version(conf: Mapping[str, object]) -> str:
    """The config's ``cniVersion``; absent means 0.1.0 (``create.DecodeVersion``).

    Raises CniError(6) when ``cniVersion`` is not a string.
    """
    raw = conf.get("cniVersion", "")
    if not isinstance(raw, str):
        raise CniError(
            DECODE_FAILURE,
            "decoding version from network config",
            f"cniVersion must be a string, got {type(raw).__name__}",
        )
    return raw or "0.1.0"


def highest_common(
    conf: Mapping[str, object], supported: Sequence[str] = ALL
) -> str | None:
    """Pick the version a conflist is run at (SPEC.md "Version considerations").

    A conflist may carry ``cniVersions`` (1.1.0); the runtime picks the highest
    entry it supports, falling back to ``cniVersion``. Returns None when no
    declared version is supported. Used by our conformance runner and sim
    runtime; a plugin only ever sees the single ``cniVersion`` it was given.
    """
    declared: list[str] = []
    versions = conf.get("cniVersions")
    if isinstance(versions, list):
        declared.extend(v for v in versions if isinstance(v, str))
    single = conf.get("cniVersion")
    if isinstance(single, str) and single:
        declared.append(single)
    ok: list[str] = []
    for v in declared:
        try:
            parse(v)
        except ValueError:
            continue
        if v in supported:
            ok.append(v)
    return max(ok, key=parse) if ok else None


def version_info(supported: Sequence[str] = ALL) -> dict[str, object]:
    """The VERSION command's output object (``{cniVersion, supportedVersions}``)."""
    return {"cniVersion": CURRENT, "supportedVersions": list(supported)}
