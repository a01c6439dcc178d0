# SPDX-License-Identifier: Apache-2.0
"""Spiderpool YAML (multi-document) to pool and reserved-IP models.

Server-side (imports PyYAML). Accepts the manifests of Spiderpool's docs as
written: ``apiVersion: spiderpool.spidernet.io/v2beta1``, ``kind:
SpiderIPPool`` / ``SpiderReservedIP``, ``metadata.name`` and ``spec``; the
older doc forms (``ipVersion: ipv4``, routes with ``to``/``via``) are handled
by ``ipamd.pools``. Every error names the document and the reason.

Two limits keep any input from costing a traceback: nesting deeper than
``MAX_NESTING`` is refused from the event stream before any document is built
(PyYAML's composer recurses once per level, and a few thousand levels end in
RecursionError), and an integer too long for ``int()`` becomes an
``Oversized`` value that the field's type check refuses by name. The CLI runs
``check_nesting`` before sending, the daemon again before parsing. libyaml
does the parsing when PyYAML was built with it (about ten times faster).
"""

from __future__ import annotations

from typing import Any

import yaml

from ipamd.pools import (
    Pool,
    PoolError,
    ReservedIP,
    pool_from_spec,
    reserved_from_spec,
    shown,
)

API_GROUP = "spiderpool.spidernet.io/"
API_VERSIONS = ("spiderpool.spidernet.io/v2beta1",)
#: Mappings and lists inside one another; a SpiderIPPool needs 4.
MAX_NESTING = 32

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Oversized:
    """An integer literal longer than Python converts (4300 digits)."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"<a {self.digits}-digit number>"


class _Loader(_BaseLoader):  # type: ignore[misc]
    """The safe loader, with integers too long to convert kept as Oversized."""

    def construct_yaml_int(self, node: Any) -> Any:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            return Oversized(len(str(node.value)))


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def check_nesting(text: str) -> None:
    """Raise PoolError when ``text`` nests deeper than MAX_NESTING.

    Reads events only (the parser keeps an explicit stack, no recursion).
    YAML syntax errors are left to ``parse_manifest``, which reports them.
    """
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_BaseLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_NESTING:
                    raise PoolError(
                        f"the YAML nests deeper than {MAX_NESTING} levels (line "
                        f"{event.start_mark.line + 1}); a SpiderIPPool needs 4"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        # libyaml scans flow collections ahead of its events and stops at its
        # own depth limit (1000) before we count to ours.
        if "maximum nesting depth" in str(exc):
            mark = getattr(exc, "problem_mark", None)
            line = f" (line {mark.line + 1})" if mark is not None else ""
            raise PoolError(
                f"the YAML nests deeper than {MAX_NESTING} levels{line}; a "
                "SpiderIPPool needs 4"
            ) from None


def _reason(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: what, and where (line and column)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        parts = [p for p in (exc.context, exc.problem) if p]
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return shown("; ".join(parts), 200)[1:-1] + where
    return shown(" ".join(str(exc).split()), 200)[1:-1]


def parse_manifest(text: str) -> tuple[list[Pool], list[ReservedIP]]:
    """All SpiderIPPool and SpiderReservedIP documents of ``text``."""
    check_nesting(text)
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        raise PoolError(f"malformed YAML: {_reason(exc)}") from None
    pools: list[Pool] = []
    reserved: list[ReservedIP] = []
    for number, doc in enumerate(docs, start=1):
        if doc is None:  # an empty document between two `---`
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List":
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise PoolError(f"document {number}: a List's 'items' must be a list")
        else:
            items = [doc]
        for item in items:
            obj = _document(item, number)
            if obj is None:
                continue
            if isinstance(obj, Pool):
                pools.append(obj)
            else:
                reserved.append(obj)
    if not pools and not reserved:
        raise PoolError("the manifest holds no SpiderIPPool or SpiderReservedIP")
    return pools, reserved


def _document(doc: Any, number: int) -> Pool | ReservedIP | None:
    where = f"document {number}"
    if not isinstance(doc, dict):
        raise PoolError(f"{where}: not a mapping")
    api = doc.get("apiVersion")
    kind = doc.get("kind")
    if not isinstance(api, str) or not api.startswith(API_GROUP):
        raise PoolError(
            f"{where}: apiVersion {shown(api)} is not {API_VERSIONS[0]} "
            f"(kind {shown(kind)})"
        )
    if api not in API_VERSIONS:
        raise PoolError(
            f"{where}: unsupported apiVersion {shown(api)}, use {API_VERSIONS[0]}"
        )
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        # YAML 1.1 reads unquoted `off`, `no`, `yes` as booleans: say so.
        raise PoolError(
            f"{where}: metadata.name is required (a string), got {shown(name)}"
        )
    spec = doc.get("spec")
    if spec is None:
        raise PoolError(f"{where}: {kind} {name} has no spec")
    if kind == "SpiderIPPool":
        return pool_from_spec(name, spec)
    if kind == "SpiderReservedIP":
        return reserved_from_spec(name, spec)
    raise PoolError(
        f"{where}: unsupported kind {shown(kind)} (ipamd takes SpiderIPPool and "
        "SpiderReservedIP)"
    )
