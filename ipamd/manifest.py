# SPDX-License-Identifier: Apache-2.0
"""Spiderpool YAML (multi-document) to pool and reserved-IP models.

Server-side (imports PyYAML). Accepts the manifests of Spiderpool's docs as
written: ``apiVersion: spiderpool.spidernet.io/v2beta1``, ``kind:
SpiderIPPool`` / ``SpiderReservedIP``, ``metadata.name`` and ``spec``; the
older doc forms (``ipVersion: ipv4``, routes with ``to``/``via``) are handled
by ``ipamd.pools``. Every error names the document and the reason.
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
)

API_GROUP = "spiderpool.spidernet.io/"
API_VERSIONS = ("spiderpool.spidernet.io/v2beta1",)


def parse_manifest(text: str) -> tuple[list[Pool], list[ReservedIP]]:
    """All SpiderIPPool and SpiderReservedIP documents of ``text``."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise PoolError(f"malformed YAML: {exc}") from None
    pools: list[Pool] = []
    reserved: list[ReservedIP] = []
    for number, doc in enumerate(docs, start=1):
        if doc is None:  # an empty document between two `---`
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List":
            items = doc.get("items") or []
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
            f"{where}: apiVersion {api!r} is not {API_VERSIONS[0]} (kind {kind!r})"
        )
    if api not in API_VERSIONS:
        raise PoolError(f"{where}: unsupported apiVersion {api}, use {API_VERSIONS[0]}")
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        # YAML 1.1 reads unquoted `off`, `no`, `yes` as booleans: say so.
        raise PoolError(f"{where}: metadata.name is required (a string), got {name!r}")
    spec = doc.get("spec")
    if spec is None:
        raise PoolError(f"{where}: {kind} {name} has no spec")
    if kind == "SpiderIPPool":
        return pool_from_spec(name, spec)
    if kind == "SpiderReservedIP":
        return reserved_from_spec(name, spec)
    raise PoolError(
        f"{where}: unsupported kind {kind!r} (ipamd takes SpiderIPPool and "
        "SpiderReservedIP)"
    )
