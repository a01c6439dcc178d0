# SPDX-License-Identifier: Apache-2.0
"""Spiderpool YAML (multi-document) to pool and reserved-IP models.

Server-side (imports PyYAML). Accepts the manifests of Spiderpool's docs as
written: ``apiVersion: spiderpool.spidernet.io/v2beta1``, ``kind:
SpiderIPPool`` / ``SpiderReservedIP``, ``metadata.name`` and ``spec``; the
older doc forms (``ipVersion: ipv4``, routes with ``to``/``via``) are handled
by ``ipamd.pools``. Every error names the document and the reason.

Two limits keep any input from costing a traceback: nesting deeper than
``MAX_NESTING`` is refused while composing (PyYAML's composer recurses once
per level, and a few thousand levels end in RecursionError), and an integer
too long for ``int()`` becomes an ``Oversized`` value that the field's type
check refuses by name. The CLI runs ``check_nesting`` before sending, the
daemon parses with the same loader.
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


class Oversized:
    """An integer literal longer than Python converts (4300 digits)."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"<a {self.digits}-digit number>"


class _Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML is untyped
    """SafeLoader with a nesting limit and a guard on integer size."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                mark = self.peek_event().start_mark
                raise PoolError(
                    f"the YAML nests deeper than {MAX_NESTING} levels (line "
                    f"{mark.line + 1}); a SpiderIPPool needs 4"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: Any) -> Any:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            return Oversized(len(str(node.value)))


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def check_nesting(text: str) -> None:
    """Raise PoolError when ``text`` nests deeper than MAX_NESTING.

    YAML syntax errors are left to the daemon's parse, which reports them.
    """
    loader = _Loader(text)
    try:
        while loader.check_node():
            loader.get_node()
    except yaml.YAMLError:
        return
    finally:
        loader.dispose()


def parse_manifest(text: str) -> tuple[list[Pool], list[ReservedIP]]:
    """All SpiderIPPool and SpiderReservedIP documents of ``text``."""
    loader = _Loader(text)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
    except yaml.YAMLError as exc:
        raise PoolError(f"malformed YAML: {exc}") from None
    finally:
        loader.dispose()
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
