# SPDX-License-Identifier: Apache-2.0
"""Domain errors of ipamd; the servicer maps each to one gRPC status code.

Standard library only. The message is the human reason sent to the client.
"""

from __future__ import annotations

from ipamd.pools import PoolError


class IpamdError(Exception):
    """Base of the errors a request can end with."""


class InvalidRequest(IpamdError):
    """Malformed request (INVALID_ARGUMENT)."""


class NotFound(IpamdError):
    """Unknown pool or attachment (NOT_FOUND)."""


class Exhausted(IpamdError):
    """No free address in any candidate pool (RESOURCE_EXHAUSTED)."""


class Conflict(IpamdError):
    """The request contradicts current state, e.g. an address in use
    (FAILED_PRECONDITION)."""


class Unavailable(IpamdError):
    """The store failed; the request changed nothing (UNAVAILABLE)."""


__all__ = [
    "Conflict",
    "Exhausted",
    "InvalidRequest",
    "IpamdError",
    "NotFound",
    "PoolError",
    "Unavailable",
]
