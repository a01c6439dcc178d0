# SPDX-License-Identifier: Apache-2.0
"""Networks as conflists in a CNI conf dir (default /etc/cni/net.d).

``<dir>/<name>.conflist`` is what podman, containerd and cnitool read by
network name. Railyard's record of each one it wrote sits in
``<dir>/.railyard/<name>.json`` (libcni reads files only, never
subdirectories), so ``get networks`` lists ours and ``delete network`` never
removes a conflist someone else wrote; ``apply`` refuses to overwrite one.

Writes are atomic per file (temp file + rename) and the batch is all or
nothing: every temp file is written first, then renamed; if a rename fails the
ones already renamed get their previous content back.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

DEFAULT_CONF_DIR = Path("/etc/cni/net.d")
RECORDS = ".railyard"
SUFFIX = ".conflist"


class ConfDirError(RuntimeError):
    """A conflist cannot be written or removed; the message says which and why."""


@dataclass(frozen=True, slots=True)
class NetworkRecord:
    """What ``get networks`` shows about a conflist railyard wrote."""

    name: str  # the conflist's name (what a runtime asks for)
    source: str  # "namespace/name" of the SpiderMultusConfig
    cni_type: str
    resource_name: str
    pools: tuple[str, ...]
    file: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "cniType": self.cni_type,
            "resourceName": self.resource_name,
            "pools": list(self.pools),
            "file": self.file,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> NetworkRecord:
        return cls(
            name=str(raw["name"]),
            source=str(raw.get("source", "")),
            cni_type=str(raw.get("cniType", "")),
            resource_name=str(raw.get("resourceName", "")),
            pools=tuple(str(p) for p in raw.get("pools", [])),
            file=str(raw.get("file", "")),
        )


@dataclass(frozen=True, slots=True)
class Change:
    record: NetworkRecord
    content: str  # the conflist file's text
    status: str  # "created", "configured" or "unchanged"


class ConfDir:
    def __init__(self, path: Path) -> None:
        self.path = path

    def conflist_path(self, name: str) -> Path:
        return self.path / f"{name}{SUFFIX}"

    def _record_path(self, name: str) -> Path:
        return self.path / RECORDS / f"{name}.json"

    def plan(
        self, wanted: Sequence[tuple[NetworkRecord, dict[str, Any]]]
    ) -> list[Change]:
        """What writing ``wanted`` would change; raises ConfDirError (nothing
        written) if a conflist of that name exists and is not railyard's."""
        changes = []
        for record, conflist in wanted:
            target = self.conflist_path(record.name)
            content = json.dumps(conflist, indent=2) + "\n"
            full = replace(record, file=str(target))
            if not target.exists():
                status = "created"
            elif not self._record_path(record.name).exists():
                raise ConfDirError(
                    f"{target} exists and was not written by railyard; "
                    "remove it or name the network otherwise "
                    "(annotation cni.spidernet.io/cniconfig-name)"
                )
            elif (
                target.read_text() == content and self._read_record(record.name) == full
            ):
                status = "unchanged"
            else:
                status = "configured"
            changes.append(Change(full, content, status))
        return changes

    def write(self, changes: Sequence[Change]) -> None:
        """Write every changed conflist and its record, all or nothing."""
        todo = [c for c in changes if c.status != "unchanged"]
        if not todo:
            return
        try:
            (self.path / RECORDS).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfDirError(f"cannot create {self.path / RECORDS}: {exc}") from None
        staged: list[tuple[Path, Path]] = []
        try:
            for change in todo:
                name = change.record.name
                staged.append((self._stage(change.content), self.conflist_path(name)))
                record = json.dumps(change.record.to_json(), indent=2) + "\n"
                staged.append((self._stage(record), self._record_path(name)))
        except OSError as exc:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)
            raise ConfDirError(f"cannot write into {self.path}: {exc}") from None
        self._commit(staged)

    def _stage(self, text: str) -> Path:
        fd, tmp = tempfile.mkstemp(prefix=".railyard-", suffix=".tmp", dir=self.path)
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        return Path(tmp)

    def _commit(self, staged: list[tuple[Path, Path]]) -> None:
        done: list[tuple[Path, str | None]] = []
        try:
            for tmp, target in staged:
                previous = target.read_text() if target.exists() else None
                os.replace(tmp, target)
                done.append((target, previous))
        except OSError as exc:
            for target, previous in reversed(done):
                if previous is None:
                    target.unlink(missing_ok=True)
                else:
                    target.write_text(previous)
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)
            raise ConfDirError(
                f"cannot write into {self.path}: {exc}; nothing changed"
            ) from None

    def _read_record(self, name: str) -> NetworkRecord | None:
        try:
            return NetworkRecord.from_json(
                json.loads(self._record_path(name).read_text())
            )
        except (OSError, ValueError, KeyError):
            return None

    def records(self) -> list[NetworkRecord]:
        """Every network railyard wrote here, by name."""
        folder = self.path / RECORDS
        if not folder.is_dir():
            return []
        found = (self._read_record(p.stem) for p in sorted(folder.glob("*.json")))
        return [r for r in found if r is not None]

    def delete(self, name: str) -> NetworkRecord:
        """Remove the conflist ``name`` (or of SpiderMultusConfig ``ns/name``)."""
        records = self.records()
        match = [r for r in records if name in (r.name, r.source)]
        if not match:
            known = ", ".join(r.name for r in records) or "none"
            raise ConfDirError(
                f"network {name} not found in {self.path} (railyard's: {known})"
            )
        if len(match) > 1:
            raise ConfDirError(
                f"{name} names several networks: {', '.join(r.name for r in match)}"
            )
        record = match[0]
        try:
            self.conflist_path(record.name).unlink(missing_ok=True)
            self._record_path(record.name).unlink()
        except OSError as exc:
            raise ConfDirError(f"cannot delete network {record.name}: {exc}") from None
        return record
