# SPDX-License-Identifier: Apache-2.0
"""ADD -> DEL records, one JSON file per attachment, written atomically.

Layout: ``<state_dir>/<plugin>/<containerID>-<ifname>.json`` (sriov-cni keeps
``/var/lib/cni/sriov/<cid>-<ifname>``). A record survives reboots of the
plugin process, not of the node's state dir policy.

Atomicity: write to a temporary file in the same directory, ``fsync`` it,
``rename`` over the final name, then ``fsync`` the directory, so after a crash
a record is either the old one, the new one, or absent — never truncated.
The directory is fsynced only when the record is new: a replacement that a
power loss undoes leaves the previous version, whole and durable (its own
save fsynced the directory), and every earlier version of a record is a state
DEL finishes from (a SIGKILL can stop a command right after any save). That
saves one of the three fsyncs of an ADD (~0.2 ms on an idle disk, more on a
busy one).
Files are 0600 and directories 0700 (a record may hold MACs and GUIDs of other
tenants' pods).

The record is a JSON object the plugin designs; this module adds the
bookkeeping keys ``containerID``, ``ifname``, ``network`` and ``plugin`` so GC
can list attachments without knowing a plugin's schema.

Standard library only.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cni import timings
from cni.errors import IO_FAILURE, CniError

log = logging.getLogger(__name__)

#: (path, mtime) of the records already reported as skipped: the exporter
#: lists the records at every scrape and must not repeat a warning forever.
_SKIPPED: set[tuple[Path, int]] = set()


def warn_skipped(path: Path, why: object) -> None:
    """Log once per file version that ``path`` was left out of a listing."""
    try:
        version = os.stat(path).st_mtime_ns
    except OSError:
        version = 0
    if (path, version) in _SKIPPED:
        return
    _SKIPPED.add((path, version))
    log.warning("skipping state record %s: %s", path, why)


_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class CacheRecord:
    """One stored attachment: its key and the plugin's data."""

    container_id: str
    ifname: str
    network: str
    path: Path
    data: dict[str, Any]


def _create_temp(directory: Path, name: str) -> tuple[int, Path]:
    """A new 0600 file ``.<name>.<random>.tmp`` beside the record, opened for writing.

    What ``tempfile.mkstemp`` does, without importing tempfile (it pulls in
    shutil, random, bz2 and lzma: ~8 ms on every plugin start).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    while True:
        # The writer's pid in the name lets a later command tell the temp
        # file of a killed writer (swept) from one being written now.
        tmp = directory / f".{name}.{os.getpid()}-{os.urandom(6).hex()}.tmp"
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def sweep_temps(directory: Path, name: str) -> None:
    """Remove the temp files of ``name`` whose writer is dead (SIGKILLed
    between creating and renaming them): they must not outlive it."""
    try:
        candidates = list(directory.glob(f".{name}.*.tmp"))
    except OSError:
        return
    for tmp in candidates:
        pid_text = tmp.name[len(name) + 2 :].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        if _pid_alive(int(pid_text)):
            continue
        try:
            tmp.unlink()
        except OSError:
            continue


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StateCache:
    """Records of one plugin under ``<state_dir>/<plugin>/``."""

    def __init__(self, state_dir: Path | str, plugin: str) -> None:
        if not plugin or "/" in plugin or plugin in (".", ".."):
            raise ValueError(f"invalid plugin name for a cache dir: {plugin!r}")
        self.dir = Path(state_dir) / plugin
        self.plugin = plugin

    def path(self, container_id: str, ifname: str) -> Path:
        """The record file of (container_id, ifname).

        Both were validated by skel (no ``/``), so they cannot escape the dir.
        """
        if "/" in container_id or "/" in ifname or not container_id or not ifname:
            raise ValueError(f"invalid cache key {container_id!r}/{ifname!r}")
        return self.dir / f"{container_id}-{ifname}{_SUFFIX}"

    def _ensure_dir(self) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # mkdir's mode is masked by umask and ignored when it exists.
        os.chmod(self.dir, 0o700)

    def save(
        self,
        container_id: str,
        ifname: str,
        data: Mapping[str, Any],
        network: str = "",
    ) -> Path:
        """Atomically write (or replace) the record; raises CniError(5) on I/O."""
        record = dict(data)
        record.update(
            containerID=container_id, ifname=ifname, network=network, plugin=self.plugin
        )
        payload = json.dumps(record, indent=1, sort_keys=True).encode()
        final = self.path(container_id, ifname)
        try:
            with timings.step(timings.RECORD_WRITE):
                self._write(final, payload)
        except OSError as e:
            raise CniError(
                IO_FAILURE, "failed to write state cache", f"{final}: {e}"
            ) from e
        return final

    def _write(self, final: Path, payload: bytes) -> None:
        """The temp file, its fsync, the rename; the directory's fsync for a
        new record (see the module docstring)."""
        self._ensure_dir()
        sweep_temps(self.dir, final.name)
        fd, tmp = _create_temp(self.dir, final.name)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            replacing = os.path.exists(final)
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        if not replacing:
            _fsync_dir(self.dir)

    def load(self, container_id: str, ifname: str) -> dict[str, Any] | None:
        """The record's data, or None when there is none (DEL must tolerate it).

        A corrupt record raises CniError(5): silently ignoring it would make
        DEL skip restoring a VF.
        """
        path = self.path(container_id, ifname)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CniError(
                IO_FAILURE, "failed to read state cache", f"{path}: {e}"
            ) from e
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise CniError(
                IO_FAILURE, "corrupt state cache record", f"{path}: {e}"
            ) from e
        if not isinstance(data, dict):
            raise CniError(
                IO_FAILURE, "corrupt state cache record", f"{path}: not an object"
            )
        return data

    def delete(self, container_id: str, ifname: str) -> bool:
        """Remove the record (and dead writers' temp files); True if one
        existed. Idempotent."""
        path = self.path(container_id, ifname)
        with timings.step(timings.RECORD_WRITE):
            return self._remove(path)

    def _remove(self, path: Path) -> bool:
        sweep_temps(self.dir, path.name)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise CniError(
                IO_FAILURE, "failed to delete state cache", f"{path}: {e}"
            ) from e
        try:
            _fsync_dir(self.dir)
        except OSError:
            pass  # the unlink itself succeeded; durability is best effort here
        return True

    def exists(self, container_id: str, ifname: str) -> bool:
        return self.path(container_id, ifname).exists()

    def records(self) -> Iterator[CacheRecord]:
        """Every readable record (for GC), sorted by file name.

        Corrupt or foreign files are skipped here — GC must continue on errors
        (SPEC.md "GC") — while ``load`` reports them. Each skip is logged with
        its path: what such a file describes (a VF, an address) is left
        for a person to look at.
        """
        try:
            names = sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return
        for name in names:
            if not name.endswith(_SUFFIX) or name.startswith("."):
                continue
            path = self.dir / name
            try:
                data = json.loads(path.read_bytes())
            except (OSError, ValueError) as exc:
                warn_skipped(path, f"unreadable: {exc}")
                continue
            if not isinstance(data, dict):
                warn_skipped(path, "not a JSON object")
                continue
            cid, ifname = data.get("containerID"), data.get("ifname")
            if not isinstance(cid, str) or not isinstance(ifname, str):
                warn_skipped(path, "no containerID/ifname strings")
                continue
            network = data.get("network")
            yield CacheRecord(
                container_id=cid,
                ifname=ifname,
                network=network if isinstance(network, str) else "",
                path=path,
                data=data,
            )
