# SPDX-License-Identifier: Apache-2.0
"""The RoCE TOS of an RDMA device: rdma_cm's configfs default and mlx5's tc.

Two places carry it, both files under the sysfs root (configfs is mounted at
``<sysfs>/kernel/config``):

    <sysfs>/kernel/config/rdma_cm/<dev>/ports/<port>/default_roce_tos
        the TOS rdma_cm gives a RoCE connection that sets none (NCCL's, via
        librdmacm). The ``rdma_cm/<dev>`` group exists only once someone made
        it (``mkdir``); the kernel then fills ``ports/``. We make it when it is
        not there and remove it on restore; one that was there is kept.
    <sysfs>/bus/pci/devices/<pci>/infiniband/<dev>/tc/<port>/traffic_class
        mlx5's per-port override for every QP (verbs users that set no
        traffic class). Reads "Global tclass=<n>" when set, "" otherwise;
        writing "<n>" sets it, "-1" clears it. Devices without it are left be.

Both are set while the device is in the host (before the move, under its
host name) and put back there after it is home: the configfs group is keyed
by the name it was made with, and sysfs shows a device only in its netns.

Standard library and ``cni.kernel`` only.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from pathlib import Path

from cni.kernel import (
    DeviceNotFound,
    KernelError,
    NotSupported,
    PortTos,
    RoceTos,
    RoceTosState,
)

log = logging.getLogger(__name__)

_TCLASS = re.compile(r"tclass=(-?\d+)")
UNSET_TRAFFIC_CLASS = "-1"


class ConfigfsRoceTos:
    """``RoceTos`` over configfs and sysfs files under ``sysfs_root``."""

    def __init__(self, sysfs_root: Path) -> None:
        self.root = Path(sysfs_root)
        self.rdma_cm = self.root / "kernel" / "config" / "rdma_cm"

    # ------------------------------------------------------------ paths

    def _device_dir(self, dev: str, pci: str) -> Path:
        path = self.root / "bus" / "pci" / "devices" / pci / "infiniband" / dev
        if not path.is_dir():
            raise DeviceNotFound(f"no RDMA device {dev} under {pci} ({path})")
        return path

    def _ports(self, dev: str, pci: str) -> list[int]:
        ports = self._device_dir(dev, pci) / "ports"
        try:
            return sorted(int(p.name) for p in ports.iterdir() if p.name.isdigit())
        except FileNotFoundError:
            raise DeviceNotFound(
                f"RDMA device {dev} shows no ports ({ports})"
            ) from None

    def _tc_file(self, dev: str, pci: str, port: int) -> Path:
        return self._device_dir(dev, pci) / "tc" / str(port) / "traffic_class"

    def _tos_file(self, dev: str, port: int) -> Path:
        return self.rdma_cm / dev / "ports" / str(port) / "default_roce_tos"

    # ------------------------------------------------------------ hooks

    def _make_group(self, group: Path) -> None:
        """mkdir in configfs: the kernel fills in ``ports/``."""
        group.mkdir()

    def _remove_group(self, group: Path) -> None:
        group.rmdir()

    def _write(self, path: Path, value: str) -> None:
        # One write(2), as `echo >` does: an attribute takes a value per write.
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    # ------------------------------------------------------------ RoceTos

    def read(self, dev: str, pci: str) -> RoceTosState:
        group = self.rdma_cm / dev
        existed = group.is_dir()
        ports = []
        for port in self._ports(dev, pci):
            tos = None
            if existed:
                tos = int(_read(self._tos_file(dev, port)) or "0")
            tc_file = self._tc_file(dev, pci, port)
            has_tc = tc_file.is_file()
            tc = None
            if has_tc:
                match = _TCLASS.search(_read(tc_file))
                tc = int(match.group(1)) if match else None
                if tc is not None and tc < 0:
                    tc = None
            ports.append(PortTos(port, tos, tc, has_tc))
        return RoceTosState(existed, tuple(ports))

    def apply(self, dev: str, pci: str, tos: int) -> None:
        before = self.read(dev, pci)
        group = self.rdma_cm / dev
        if not before.group_existed and not self.rdma_cm.is_dir():
            raise NotSupported(
                f"no {self.rdma_cm}: configfs is not mounted or rdma_cm "
                "is not loaded (modprobe rdma_cm)"
            )
        try:
            if not before.group_existed:
                self._make_group(group)
            for port in before.ports:
                self._write(self._tos_file(dev, port.port), str(tos))
                if port.has_traffic_class:
                    self._write(self._tc_file(dev, pci, port.port), str(tos))
        except (OSError, KernelError) as exc:
            # Nothing half-set: what was written goes back before the error.
            try:
                self.restore(dev, pci, before)
            except KernelError as undo:
                log.error("RoCE TOS of %s not fully restored: %s", dev, undo)
            if isinstance(exc, KernelError):
                raise
            raise _kernel_error(exc, f"setting RoCE TOS {tos} on {dev}") from exc
        log.info("RDMA device %s: RoCE TOS %d on ports %s", dev, tos,
                 [p.port for p in before.ports])  # fmt: skip

    def restore(self, dev: str, pci: str, before: RoceTosState) -> None:
        group = self.rdma_cm / dev
        try:
            for port in before.ports:
                if port.has_traffic_class:
                    tc = self._tc_file(dev, pci, port.port)
                    if tc.is_file():
                        value = port.traffic_class
                        self._write(
                            tc, UNSET_TRAFFIC_CLASS if value is None else str(value)
                        )
                if before.group_existed and port.roce_tos is not None:
                    self._write(self._tos_file(dev, port.port), str(port.roce_tos))
            if not before.group_existed and group.is_dir():
                self._remove_group(group)
        except OSError as exc:
            raise _kernel_error(exc, f"restoring the RoCE TOS of {dev}") from exc


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise _kernel_error(exc, f"reading {path}") from exc


def _kernel_error(exc: OSError, what: str) -> KernelError:
    code = exc.errno or errno.EIO
    detail = f"{what}: {os.strerror(code)} (errno {code})"
    if code == errno.ENOENT:
        return DeviceNotFound(detail, code)
    return KernelError(detail, code)


# Conformance with the kernel seam, checked by mypy (Go's `var _ X = &Y{}`).
_conforms: type[RoceTos] = ConfigfsRoceTos
