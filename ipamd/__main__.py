# SPDX-License-Identifier: Apache-2.0
"""``python -m ipamd`` runs the ``ipamd`` command."""

from __future__ import annotations

from ipamd.cli import main

if __name__ == "__main__":
    main()
