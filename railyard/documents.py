# SPDX-License-Identifier: Apache-2.0
"""The documents of one ``railyard apply``: YAML from files or stdin, by kind.

Every document keeps where it came from (file and 1-based position), so each
message names it the way a user finds it again. ``kind: List`` is unrolled, as
kubectl does. A kind railyard does not take (the guide's
SriovNetworkNodePolicy, for the sriov-network-operator) is kept aside to be
reported and skipped, never fatal; a document that is not an object at all is
an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

SPIDERPOOL_API = "spiderpool.spidernet.io/v2beta1"
POOL_KINDS = ("SpiderIPPool", "SpiderReservedIP")
NETWORK_KIND = "SpiderMultusConfig"


class DocumentError(ValueError):
    """A file or document cannot be read; the message names it."""


@dataclass(frozen=True, slots=True)
class Document:
    source: str  # the file name as given, "-" for stdin
    number: int  # 1-based position in its file
    body: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion", ""))

    @property
    def name(self) -> str:
        meta = self.body.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        return name if isinstance(name, str) else ""

    @property
    def where(self) -> str:
        return f"{self.source} document {self.number}"

    def describe(self) -> str:
        return f"{self.where} ({self.kind} {self.name or '<no name>'})"


@dataclass(slots=True)
class Documents:
    """The documents of every ``-f``, in order, split by what railyard does."""

    pools: list[Document] = field(default_factory=list)
    networks: list[Document] = field(default_factory=list)
    skipped: list[Document] = field(default_factory=list)


def parse(text: str, source: str) -> list[Document]:
    """The non-empty documents of one YAML stream."""
    try:
        raw = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        # PyYAML's message carries line and column; the guide's own partial
        # documents (a literal `...` for elided fields) end up here.
        raise DocumentError(f"{source}: malformed YAML: {_one_line(exc)}") from None
    docs: list[Document] = []
    for number, body in enumerate(raw, start=1):
        if body is None:  # an empty document between two `---`
            continue
        if not isinstance(body, Mapping):
            raise DocumentError(f"{source} document {number}: not a YAML mapping")
        if body.get("kind") == "List":
            items = body.get("items") or []
            if not isinstance(items, list) or not all(
                isinstance(i, Mapping) for i in items
            ):
                raise DocumentError(
                    f"{source} document {number}: List items must be mappings"
                )
            docs.extend(Document(source, number, item) for item in items)
        else:
            docs.append(Document(source, number, body))
    return docs


def sort(docs: Iterable[Document]) -> Documents:
    out = Documents()
    for doc in docs:
        if doc.kind in POOL_KINDS:
            out.pools.append(doc)
        elif doc.kind == NETWORK_KIND:
            out.networks.append(doc)
        else:
            out.skipped.append(doc)
    return out


def load(sources: Iterable[tuple[str, str]]) -> Documents:
    """``(name, text)`` pairs, in ``-f`` order, into sorted documents."""
    docs: list[Document] = []
    for source, text in sources:
        docs.extend(parse(text, source))
    return sort(docs)


def pools_manifest(docs: Iterable[Document]) -> str:
    """The pool documents as one YAML stream, the form ipamd's ApplyPools takes."""
    text: str = yaml.safe_dump_all([dict(d.body) for d in docs], sort_keys=False)
    return text


def _one_line(exc: yaml.YAMLError) -> str:
    # The context mark points at the line that started the trouble (the
    # guide's `...`); the problem mark at where the parser gave up.
    mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if mark is None or not problem:
        return " ".join(str(exc).split())
    what: str = f"{context}: {problem}" if context else str(problem)
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}"
