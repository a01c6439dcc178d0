# SPDX-License-Identifier: Apache-2.0
"""``railyard-rdma`` / ``rdma``: the CNI entry point, as small as a Go main.

``cni.plugins.registry.main`` hands skel a factory, not the command module:
VERSION (which podman runs before every ADD and DEL) and env/stdin errors are
answered before ``commands`` (and with it cni.attach / cni.kernel) is imported.
"""

from __future__ import annotations

from cni.plugins.registry import main as run


def main() -> None:
    run("rdma")


if __name__ == "__main__":
    main()
