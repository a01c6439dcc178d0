# SPDX-License-Identifier: Apache-2.0
"""The lab's CNI bin dir: launchers running our plugins on the simulated host.

The production plugins know one host, the real one. A lab offers its own
executables ``sriov``, ``ib-sriov``, ``rdma`` and ``railyard-ipam`` in
``<lab>/cni-bin`` (put that dir in a runtime's CNI_PATH): each is a tiny
script that runs the plugin's production entry (``cni.plugins.registry``)
with the lab's ``DepsFactory`` (``railyard_sim.host``), the way sriov-cni
builds a second main for its mocked tests. The lab directory is written into
the script; no environment variable selects the simulated host.

Imports: standard library and ``cni.plugins.registry`` (light, like a
plugin's ``__main__``); the lab's adapters only when a command runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cni.plugins.registry import PLUGINS, main

BIN_DIR = "cni-bin"
MARK = "railyard-sim launcher"


def write(bin_dir: Path | str, lab_dir: Path | str, python: str = "") -> Path:
    """Write one launcher per plugin into ``bin_dir`` for the lab at ``lab_dir``.

    ``python`` (default: this interpreter) runs them, isolated (``-I``) as
    packaging/install.sh's launchers are.
    """
    out = Path(bin_dir)
    lab = Path(lab_dir).absolute()
    python = python or sys.executable
    if any(c.isspace() for c in python):
        raise ValueError(f"{python}: a shebang interpreter path cannot hold spaces")
    out.mkdir(parents=True, exist_ok=True)
    for cni_type in PLUGINS:
        script = out / cni_type
        tmp = out / f".{cni_type}.tmp"
        tmp.write_text(
            f"#!{python} -I\n"
            f"# {MARK}: the {cni_type} plugin on the simulated host {lab}\n"
            "from railyard_sim.launchers import run\n"
            f"run({cni_type!r}, {str(lab)!r})\n"
        )
        tmp.chmod(0o755)
        os.replace(tmp, script)
    return out


def run(cni_type: str, lab_dir: str) -> None:
    """A launcher's body: the plugin's main with the lab's deps factory."""
    from railyard_sim.host import deps_factory

    entry = PLUGINS[cni_type]
    main(
        cni_type,
        make_deps=deps_factory(lab_dir),
        about=f"{entry.about} (simulated host {lab_dir})",
    )
