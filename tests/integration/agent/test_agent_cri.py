# SPDX-License-Identifier: Apache-2.0
"""``cni.agent.cri`` against a CRI runtime played on a unix socket
(``tests/doubles/cri_runtime.py``: hand-encoded runtime.v1 bytes, so the
client's message declarations are checked against the wire)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cni.agent.cri import CriSandboxes, CriUnavailable, resolve_socket
from tests.doubles.cri_runtime import FakeSandbox, serve_cri

pytestmark = pytest.mark.integration


@pytest.fixture
def runtime() -> Iterator[Path]:
    known = [
        FakeSandbox("sb-ready", "web-0", "uid-1", "default"),
        FakeSandbox("sb-stopped", "job-x", "uid-2", "batch", ready=False),
    ]
    with serve_cri(lambda: known) as sock:
        yield sock


def test_every_sandbox_the_runtime_knows_is_listed_ready_or_not(runtime: Path) -> None:
    cri = CriSandboxes(str(runtime))
    sandboxes = {s.id: s for s in cri.list()}
    assert set(sandboxes) == {"sb-ready", "sb-stopped"}
    ready = sandboxes["sb-ready"]
    assert (ready.name, ready.uid, ready.namespace, ready.ready) == (
        "web-0",
        "uid-1",
        "default",
        True,
    )
    assert sandboxes["sb-stopped"].ready is False
    assert cri.runtime() == "containerd v1.7.24"


def test_a_runtime_that_does_not_answer_is_unavailable(tmp_path: Path) -> None:
    cri = CriSandboxes(str(tmp_path / "no-such.sock"), timeout=0.5)
    with pytest.raises(CriUnavailable, match="ListPodSandbox"):
        cri.list()
    # auto, on a host with no runtime socket (yet): asked again next time.
    absent = (tmp_path / "containerd.sock", tmp_path / "crio.sock")
    auto = CriSandboxes("auto", timeout=0.5, known=absent)
    with pytest.raises(CriUnavailable, match="no container runtime socket"):
        auto.list()


def test_auto_takes_the_first_runtime_socket_present(tmp_path: Path) -> None:
    containerd, crio = tmp_path / "containerd.sock", tmp_path / "crio.sock"
    crio.touch()
    assert resolve_socket("auto", (containerd, crio)) == crio
    containerd.touch()
    assert resolve_socket("auto", (containerd, crio)) == containerd
    assert resolve_socket("", (containerd, crio)) is None
    assert resolve_socket("/x/cri.sock") == Path("/x/cri.sock")
