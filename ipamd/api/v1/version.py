# SPDX-License-Identifier: Apache-2.0
"""The API version clients send as ``client_version``, and the release.

Imports nothing: the plugins read ``RELEASE`` on their VERSION path, ipamd
reports it in Status. The server accepts any ``1.<minor>``: minors only add
fields (proto/README.md).
"""

from __future__ import annotations

#: The release of this source tree (the package version; the plugins and the
#: daemon report the same one).
RELEASE = "0.1.0"
API_VERSION = "1.1"
API_MAJOR = 1


def compatible(client_version: str) -> bool:
    """True when a client speaking ``client_version`` understands this server."""
    major, _, _ = client_version.partition(".")
    return major.isdigit() and int(major) == API_MAJOR
