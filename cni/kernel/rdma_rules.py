# SPDX-License-Identifier: Apache-2.0
"""What the kernel accepts as an RDMA device name and as a RoCE TOS, checked
before anything changes.

Names (``RDMA_NLDEV_CMD_SET`` with ``RDMA_NLDEV_ATTR_DEV_NAME``): the kernel
copies at most ``IB_DEVICE_NAME_MAX`` (64) bytes including the NUL, so a
longer name would be cut silently, and refuses an empty one (EINVAL); the
name becomes a sysfs directory, where a ``/`` is rewritten and ``.``/``..``
cannot be. We accept 1-63 ASCII letters, digits, ``_``, ``-`` and ``.``,
not ``.`` or ``..``, and not a name with ``%`` (the kernel's own name
templates, ``mlx5_%d``).

TOS: the IP TOS byte RoCEv2 packets carry, 0-255; its upper six bits are the
DSCP the fabric's lossless queue matches, its lower two ECN. Only RoCE has an
IP header: an InfiniBand port has no TOS (the plugin refuses it there).

Standard library and ``cni.kernel`` only.
"""

from __future__ import annotations

import re

from cni.kernel import InvalidArgument

IB_DEVICE_NAME_MAX = 64  # include/rdma/ib_verbs.h, the NUL included
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def check_device_name(name: str) -> str:
    """``name`` if the kernel takes it as an RDMA device name; else InvalidArgument."""
    if not name:
        raise InvalidArgument("an RDMA device name cannot be empty")
    if len(name.encode()) >= IB_DEVICE_NAME_MAX:
        raise InvalidArgument(
            f"RDMA device name {name!r} is {len(name.encode())} bytes; the kernel "
            f"takes at most {IB_DEVICE_NAME_MAX - 1} (IB_DEVICE_NAME_MAX)"
        )
    if name in (".", "..") or not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"RDMA device name {name!r} is not valid: use letters, digits, '_', "
            "'-' and '.' (not '.' or '..')"
        )
    return name


def check_roce_tos(value: object) -> int:
    """A TOS byte (0-255) as an int, else InvalidArgument."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"a RoCE TOS must be an integer 0-255, got {value!r}")
    if not 0 <= value <= 255:
        raise InvalidArgument(
            f"RoCE TOS {value} is out of range 0-255 (DSCP in the upper six "
            "bits: DSCP 26 with ECN capable is 106)"
        )
    return value


def dscp_of(tos: int) -> int:
    return tos >> 2
