# SPDX-License-Identifier: Apache-2.0
"""The one version string, read without importlib.metadata (costs ~60 ms at start)."""

VERSION = "0.1.0"
