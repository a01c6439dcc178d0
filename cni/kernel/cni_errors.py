# SPDX-License-Identifier: Apache-2.0
"""The one table from the kernel seam's errors to CNI error codes.

Domain code names what it was doing and to which device; the code comes from
here, so a kernel failure reaches the runtime as a CNI error that says which
step failed on which device, never as "internal error" (999). Three ways in:

- ``kernel_step("bring net1 up in /var/run/netns/x")``: a block of kernel
  calls that is one step; a ``KernelError`` leaving it becomes the CniError
  the table maps it to, its message the step, its details the kernel's words;
- ``cni_error(exc, msg)``: the same for a step that already catches the
  error (to keep a peer's message, or to clean up first);
- the plugin boundary (``cni.plugins.binding``) maps what no step caught, as
  the last resort: the message then names the command and the interface.

``NetnsNotFound`` (the pod's netns is gone or is not one) is 104; every other
kernel refusal (a device missing, busy, refusing a setting, a bounded wait
that ran out) is 100, Railyard's device error, as the Go peers report any
netlink failure with their own message and no spec code.

Standard library, ``cni.errors`` and the ``cni.kernel`` contract only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from cni.errors import DEVICE_ERROR, NETNS_ERROR, CniError
from cni.kernel import KernelError, NetnsNotFound

#: Most specific first; ``KernelError`` catches the rest.
CODES: tuple[tuple[type[KernelError], int], ...] = (
    (NetnsNotFound, NETNS_ERROR),
    (KernelError, DEVICE_ERROR),
)


def code_of(exc: KernelError) -> int:
    """The CNI error code of a kernel error."""
    return next(code for kind, code in CODES if isinstance(exc, kind))


def cni_error(exc: KernelError, msg: str, details: str = "") -> CniError:
    """``exc`` as the runtime sees it: ``msg`` names the step and the device;
    ``details`` (default: the kernel's words) what the kernel said."""
    return CniError(code_of(exc), msg, f"{details}: {exc}" if details else str(exc))


@contextmanager
def kernel_step(step: str) -> Iterator[None]:
    """Run one step's kernel calls; a ``KernelError`` becomes its CniError."""
    try:
        yield
    except KernelError as exc:
        raise cni_error(exc, step) from exc
