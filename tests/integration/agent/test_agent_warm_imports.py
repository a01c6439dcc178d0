# SPDX-License-Identifier: Apache-2.0
"""The agent's workers import nothing: what a request needs is loaded before
the agent listens (``cni.agent.plugins.PRELOAD`` and each plugin's commands).

A module imported in a worker is imported again by every request (the
workers exit), so it costs every ADD and DEL; grpc's channel code did, ~5 ms
of each ipamd call. Python's own import-time report (PYTHONPROFILEIMPORTTIME)
in the agent's log shows every import; after the agent listens there must be
none while a warm ADD and DEL run through the shim to a real ipamd.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from railyard_sim import agent
from railyard_sim.lab import Lab
from railyard_sim.runtime import Attachment
from tests.doubles.lab_ipamd import lab_with_ipamd, sriov_conf, warm_runtime

pytestmark = pytest.mark.integration


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    with lab_with_ipamd(tmp_path, rails=1, vfs_per_pf=1) as lab:
        with monkeypatch.context() as env:
            env.setenv("PYTHONPROFILEIMPORTTIME", "1")
            agent.start(lab.dir)
        try:
            yield lab
        finally:
            agent.stop(lab.dir)


def test_a_warm_add_and_del_import_nothing_in_the_worker(
    lab: Lab, tmp_path: Path
) -> None:
    log = lab.dir / "agent" / "agent.log"
    before = len(log.read_text().splitlines())
    name = lab.netns_name("imp")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        conf = sriov_conf(lab)
        rt = warm_runtime(lab, tmp_path)
        att = Attachment("cimports", f"/var/run/netns/{name}", "net1")
        assert rt.add(conf, att)["ips"]
        rt.delete(conf, att)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    during = log.read_text().splitlines()[before:]
    imported = [line for line in during if line.startswith("import time:")]
    assert imported == [], "imported by a worker:\n" + "\n".join(imported)
