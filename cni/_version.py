# SPDX-License-Identifier: Apache-2.0
"""The one version string, read without importlib.metadata (costs ~60 ms at start).

It lives in the API package, which the plugins and ipamd both depend on.
"""

from ipamd.api.v1.version import RELEASE as VERSION

__all__ = ["VERSION"]
