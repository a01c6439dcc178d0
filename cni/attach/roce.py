# SPDX-License-Identifier: Apache-2.0
"""The RoCE TOS step of an RDMA attachment: refuse it where it cannot apply,
set it with its undo on the ADD's rollback, put it back on DEL.

Written against ``cni.kernel.RoceTos`` (``Deps.roce_tos``); the values found
before the change travel in the attachment record (``RdmaSection``), so a
DEL in another process, or GC, restores exactly them.

Order in the rdma plugin's ADD: check (before any change), read, record,
``set_roce_tos`` (host name, device in the host), move, rename. DEL: rename
back, move out, ``restore_roce_tos``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from cni.errors import DEVICE_ERROR, INVALID_CONFIG, CniError
from cni.kernel import KernelError, RoceTos, RoceTosState
from cni.kernel.rdma_rules import dscp_of
from cni.rollback import Rollback

log = logging.getLogger(__name__)


class LinkLayerSysfs(Protocol):
    """The part of ``cni.kernel.sysfs.Sysfs`` this module needs."""

    def rdma_link_layer(self, pci: str, dev: str, port: int = 1) -> str | None: ...


def check_roce_link(sysfs: LinkLayerSysfs, pci: str, dev: str, tos: int) -> None:
    """CniError 7 unless ``dev`` is RoCE: InfiniBand has no IP header to mark."""
    layer = sysfs.rdma_link_layer(pci, dev)
    if layer == "InfiniBand":
        raise CniError(
            INVALID_CONFIG,
            f"roceTos {tos} cannot apply to {dev} ({pci}): its link layer is "
            "InfiniBand",
            "a TOS marks RoCE (IP) packets; on InfiniBand use the partition's "
            "service level instead, and drop roceTos from this network",
        )
    if layer != "Ethernet":
        raise CniError(
            DEVICE_ERROR,
            f"roceTos: cannot tell the link layer of {dev} ({pci})",
            "sysfs shows no infiniband/<dev>/ports/1/link_layer",
        )


@contextmanager
def _device_error(what: str) -> Iterator[None]:
    """A kernel refusal inside the block as CniError 100 saying ``what``."""
    try:
        yield
    except KernelError as exc:
        raise CniError(DEVICE_ERROR, what, str(exc)) from exc


def read_roce_tos(roce: RoceTos, dev: str, pci: str) -> RoceTosState:
    with _device_error(f"cannot read the RoCE TOS of {dev}"):
        return roce.read(dev, pci)


def set_roce_tos(
    roce: RoceTos, dev: str, pci: str, tos: int, before: RoceTosState, rb: Rollback
) -> None:
    with _device_error(f"failed to set RoCE TOS {tos} on {dev}"):
        roce.apply(dev, pci, tos)
    rb.push(lambda: roce.restore(dev, pci, before), f"restore the RoCE TOS of {dev}")
    log.info("RDMA device %s: RoCE TOS %d (DSCP %d)", dev, tos, dscp_of(tos))


def restore_roce_tos(roce: RoceTos, dev: str, pci: str, before: RoceTosState) -> None:
    with _device_error(f"failed to restore the RoCE TOS of {dev}"):
        roce.restore(dev, pci, before)
    log.info("RDMA device %s: RoCE TOS restored", dev)
