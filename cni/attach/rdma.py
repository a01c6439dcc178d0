# SPDX-License-Identifier: Apache-2.0
"""The VF's RDMA device: find it, check the host allows moving it, move it
into the pod netns and back.

Written against ``cni.kernel.RdmaOps`` and a sysfs reader (``Sysfs``); imports
nothing third-party. Used by the chained ``rdma`` plugin, by ``ib-sriov`` with
``rdmaIsolation`` and by ``sriov`` with ``rdmaIsolation`` / ``enableRdma``.

How a plugin uses it (the sriov and ib-sriov ADD)::

    require_exclusive(deps.rdma)                 # before the first change
    dev = resolve_rdma_device(deps.sysfs, pci)   # during discovery, host view
    state.rdma_device = dev; store.save(state)   # persisted before moving
    move_rdma_in(deps.rdma, dev, netns, rb)      # joins the ADD's Rollback
    ... move the netdev (after the RDMA device: on IPoIB the kernel recreates
    the ULP netdev in the host when the RDMA device changes netns, so re-read
    the netdev name by PCI afterwards) ...

and DEL, after the netdev is back in the host::

    move_rdma_out(deps.rdma, state.rdma_device, cni_netns or state.netns)

Pass the recorded netns when CNI_NETNS is empty: a pod netns that still lives
is then reached, and one that is gone is tolerated. After anything that
rebinds the VF driver (ib-sriov's GUID step) resolve the device again: the
kernel may number the recreated RDMA device anew.

Semantics:

- ``resolve_rdma_device`` wants exactly one entry under
  ``<sysfs>/bus/pci/devices/<pci>/infiniband/`` (rdma-cni's rule and texts).
- ``require_exclusive`` fails (code 100) in shared mode and says how to
  switch; a host without RDMA gets its own clear message.
- ``move_rdma_in`` raises CniError 100 (104 for a missing netns) and pushes
  the move back onto the caller's ``Rollback``, so one failure later in the
  ADD undoes it too.
- ``move_rdma_out`` is DEL's: it is idempotent and tolerates a netns that is
  gone or empty (``None``/""): when a netns dies, the kernel returns its RDMA
  devices to the host's (init) netns, so "already in the host" is success.
  It returns a ``MoveOutcome`` (MOVED, ALREADY_HOME, or NOT_FOUND - logged
  as a warning, nothing left to do) and raises CniError 100 only when the
  kernel refuses the move and the device is not in the host, so the caller
  keeps its state and a retried DEL can finish the job.

Namespaces in exclusive mode: a device is only visible from the netns it is
in, so the move back is done from inside the pod netns (``RdmaOps.move`` with
``netns=<pod>``); the adapter handles that.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol

from cni.errors import DEVICE_ERROR, CniError
from cni.kernel import (
    DeviceNotFound,
    InvalidArgument,
    KernelError,
    LinkExists,
    NetnsNotFound,
    NotSupported,
    RdmaOps,
)
from cni.kernel.cni_errors import cni_error
from cni.rollback import Rollback

log = logging.getLogger(__name__)

SWITCH_HINT = (
    "switch the host to exclusive mode with `rdma system set netns exclusive` "
    "(only while no other network namespace exists), or persistently with "
    "`options ib_core netns_mode=0` in /etc/modprobe.d/ and reloading ib_core "
    "(or rebooting)"
)


class RdmaSysfs(Protocol):
    """The part of ``cni.kernel.sysfs.Sysfs`` this module needs."""

    def rdma_devices(self, pci: str) -> Sequence[str]: ...


class MoveOutcome(StrEnum):
    """What ``move_rdma_out`` found (for logs and tests)."""

    MOVED = "moved"  # it was in the pod netns and is now in the host
    ALREADY_HOME = "already in the host"  # e.g. the netns died before DEL
    NOT_FOUND = "not found"  # neither in the pod nor the host: warned


def resolve_rdma_device(sysfs: RdmaSysfs, pci: str) -> str:
    """The single RDMA device of PCI function ``pci``; CniError 100 otherwise."""
    what = f"failed to get RDMA device for device ID {pci}"
    try:
        names = sorted(sysfs.rdma_devices(pci))
    except InvalidArgument as exc:
        raise CniError(
            DEVICE_ERROR,
            what,
            f"{exc} (auxiliary/SF devices are not supported, only PCI functions)",
        ) from exc
    except (KernelError, OSError) as exc:
        raise CniError(DEVICE_ERROR, what, str(exc)) from exc
    if not names:
        raise CniError(
            DEVICE_ERROR,
            what,
            f"no RDMA devices found (nothing under {pci}'s infiniband/ in sysfs; "
            "is the RDMA driver loaded for this VF?)",
        )
    if len(names) > 1:
        raise CniError(
            DEVICE_ERROR,
            what,
            f"discovered more than one RDMA device {names}. Unsupported state",
        )
    return names[0]


def require_exclusive(rdma: RdmaOps) -> None:
    """Refuse unless the RDMA subsystem is in exclusive netns mode."""
    try:
        mode = rdma.netns_mode()
    except NotSupported as exc:
        raise CniError(
            DEVICE_ERROR, "RDMA is not available on this host", str(exc)
        ) from exc
    except KernelError as exc:
        raise cni_error(exc, "failed to read the RDMA subsystem netns mode") from exc
    if mode != "exclusive":
        raise CniError(
            DEVICE_ERROR,
            f"RDMA subsystem namespace awareness mode is set to {mode}, expecting "
            "it to be set to exclusive, invalid system configurations",
            SWITCH_HINT,
        )


def move_rdma_in(rdma: RdmaOps, dev: str, netns: str, rb: Rollback) -> None:
    """Move ``dev`` from the host into ``netns``; the undo goes onto ``rb``."""
    try:
        rdma.move(dev, netns)
    except NetnsNotFound as exc:
        raise cni_error(exc, f"failed to open netns {netns!r}") from exc
    except KernelError as exc:
        raise cni_error(
            exc, f"failed to move RDMA device {dev} to netns {netns}"
        ) from exc
    rb.push(lambda: _move_back(rdma, dev, netns), f"move RDMA device {dev} back")
    log.info("RDMA device %s moved into %s", dev, netns)


def rename_rdma_in(
    rdma: RdmaOps, dev: str, name: str, netns: str, rb: Rollback
) -> None:
    """Give ``dev``, now in ``netns``, the pod's name ``name``; the rename back
    goes onto ``rb`` (it must run before the move back, which is older)."""
    try:
        rdma.rename(dev, name, netns=netns)
    except LinkExists as exc:
        raise CniError(
            DEVICE_ERROR,
            f"cannot name RDMA device {dev} {name!r} in {netns}: an RDMA device "
            "of that name exists",
            f"{exc}. Released kernels keep RDMA device names unique per host, "
            "not per netns: two pods on one node cannot both use it (make "
            "rdmaDevName unique per pod, or leave it out)",
        ) from exc
    except KernelError as exc:
        raise CniError(
            DEVICE_ERROR,
            f"failed to rename RDMA device {dev} to {name!r} in {netns}",
            str(exc),
        ) from exc
    rb.push(
        lambda: rdma.rename(name, dev, netns=netns),
        f"rename RDMA device {name} back to {dev}",
    )
    log.info("RDMA device %s is %s in %s", dev, name, netns)


def rename_rdma_home(
    rdma: RdmaOps, pod_name: str, host_name: str, netns: str | None
) -> None:
    """DEL: give the device its host name back, in the pod netns or, when that
    netns died (the kernel returned the device under the pod's name), in the
    host. Idempotent; CniError 100 when the kernel refuses (DEL keeps its
    record and a retry finishes)."""
    if pod_name == host_name:
        return
    for where in (netns, None) if netns else (None,):
        try:
            present = pod_name in rdma.devices(where)
        except NetnsNotFound:
            continue
        except KernelError as exc:
            log.warning("cannot list RDMA devices in %s: %s", where or "the host", exc)
            continue
        if not present:
            continue
        try:
            rdma.rename(pod_name, host_name, netns=where)
        except KernelError as exc:
            raise CniError(
                DEVICE_ERROR,
                f"failed to rename RDMA device {pod_name} back to {host_name}",
                str(exc),
            ) from exc
        log.info(
            "RDMA device %s renamed back to %s in %s",
            pod_name,
            host_name,
            where or "the host netns",
        )
        return
    log.info("RDMA device %s not found: already %s again", pod_name, host_name)


def _move_back(rdma: RdmaOps, dev: str, netns: str) -> None:
    outcome = move_rdma_out(rdma, dev, netns)
    if outcome is MoveOutcome.NOT_FOUND:
        raise KernelError(f"RDMA device {dev} is neither in {netns} nor the host")


def _in_host(rdma: RdmaOps, dev: str) -> bool:
    try:
        return dev in rdma.devices(None)
    except KernelError as exc:
        log.warning("cannot list the host's RDMA devices: %s", exc)
        return False


def move_rdma_out(rdma: RdmaOps, dev: str, netns: str | None) -> MoveOutcome:
    """Bring ``dev`` back to the host from ``netns`` (DEL; see module doc)."""
    failure = f"failed to restore RDMA device {dev} to default namespace"
    if netns:
        try:
            rdma.move(dev, None, netns=netns)
        except NetnsNotFound:
            log.info("netns %s is gone; the kernel returns %s to the host", netns, dev)
        except DeviceNotFound:
            log.info("RDMA device %s is not in %s", dev, netns)
        except NotSupported as exc:
            raise cni_error(exc, failure) from exc
        except KernelError as exc:
            if _in_host(rdma, dev):
                log.info("RDMA device %s already in the host (%s)", dev, exc)
                return MoveOutcome.ALREADY_HOME
            raise cni_error(exc, failure) from exc
        else:
            log.info("RDMA device %s moved back to the host from %s", dev, netns)
            return MoveOutcome.MOVED
    if _in_host(rdma, dev):
        return MoveOutcome.ALREADY_HOME
    log.warning(
        "RDMA device %s is neither in %s nor in the host netns; nothing to restore",
        dev,
        netns or "the (unknown) pod netns",
    )
    return MoveOutcome.NOT_FOUND
