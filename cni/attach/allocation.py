# SPDX-License-Identifier: Apache-2.0
"""Per-VF allocation markers: which pod netns holds a PCI function.

Standard library and the contract modules only.

sriov-cni's fix for the DEL/ADD race (its ``pci_allocator.go``):
a file ``<state_dir>/pci/<pci>`` holds the netns path of the pod using the VF.
ADD refuses a VF whose marker names a netns that still exists; a marker whose
netns is gone is stale and cleared. Always used under the per-PCI lock.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from cni.errors import DEVICE_ERROR, IO_FAILURE, CniError
from cni.kernel import Netns

log = logging.getLogger(__name__)


class Allocations:
    """Markers under ``<state_dir>/pci/``."""

    def __init__(self, state_dir: Path | str) -> None:
        self.dir = Path(state_dir) / "pci"

    def _path(self, pci: str) -> Path:
        return self.dir / pci

    def holder(self, pci: str) -> str | None:
        try:
            return self._path(pci).read_text().strip() or None
        except FileNotFoundError:
            return None

    def check(self, pci: str, netns: str, namespaces: Netns) -> None:
        """Refuse ``pci`` when another netns that still exists holds it."""
        held_by = self.holder(pci)
        if held_by is not None and held_by != netns:
            if namespaces.exists(held_by):
                raise CniError(
                    DEVICE_ERROR,
                    f"pci address {pci} is already allocated",
                    f"held by netns {held_by}",
                )
            log.info("clearing stale allocation of %s (netns %s is gone)", pci, held_by)

    def claim(self, pci: str, netns: str, namespaces: Netns) -> None:
        """Mark ``pci`` as used by ``netns``; refuse if a live netns holds it."""
        self.check(pci, netns, namespaces)
        # One fixed temp name is safe: markers change only under the PCI lock.
        tmp = self._tmp(pci)
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp.write_bytes(netns.encode())
            os.replace(tmp, self._path(pci))
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError | UnicodeError):
                raise CniError(
                    IO_FAILURE, "failed to mark VF allocated", str(exc)
                ) from exc
            raise

    def _tmp(self, pci: str) -> Path:
        return self._path(pci).with_name(f".{pci}.tmp")

    def release(self, pci: str) -> None:
        # Also the temp file of a claim killed half-way (it held the lock).
        for path in (self._path(pci), self._tmp(pci)):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
