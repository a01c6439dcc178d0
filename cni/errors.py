# SPDX-License-Identifier: Apache-2.0
"""CNI error codes and the one exception type a command may raise to the runtime.

Imports nothing third-party: config and env errors must be reported without
loading pyroute2 or grpc (runtimes probe VERSION before every ADD and DEL).
"""

from __future__ import annotations

# SPEC.md "Error" section: 0-99 are reserved for the spec, 100+ are ours.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
INVALID_NETNS = 8
TRY_AGAIN_LATER = 11
STATUS_UNAVAILABLE = 50
STATUS_LIMITED = 51

# Railyard's own codes.
DEVICE_ERROR = 100  # VF, PF or RDMA device missing, busy or refusing a setting
IPAM_ERROR = 101  # ipamd or a delegated IPAM plugin failed
IP_CONFLICT = 102  # another host answers for the allocated address
GATEWAY_UNREACHABLE = 103  # the pool gateway does not answer ARP/NDP
NETNS_ERROR = 104  # the pod netns is unusable
TIMEOUT = 105  # the command's hard deadline expired
CHECK_FAILED = 106  # CHECK found the attachment differs from prevResult
INTERNAL = 999  # libcni's ErrInternal: an unexpected exception


class CniError(Exception):
    """An error reported to the runtime as the spec's error JSON on stdout."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_json(self, cni_version: str) -> dict[str, object]:
        out: dict[str, object] = {
            "cniVersion": cni_version,
            "code": self.code,
            "msg": self.msg,
        }
        if self.details:
            out["details"] = self.details
        return out

    def __str__(self) -> str:
        return f"{self.msg}: {self.details}" if self.details else self.msg

    def __repr__(self) -> str:
        return f"CniError({self.code}, {self.msg!r}, {self.details!r})"
