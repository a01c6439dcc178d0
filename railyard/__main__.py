# SPDX-License-Identifier: Apache-2.0
"""``python -m railyard``: the same as the ``railyard`` console script."""

from railyard.cli import main

main()
