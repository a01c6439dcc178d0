# SPDX-License-Identifier: Apache-2.0
"""In-process driver of ``cni.skel.run_plugin`` for the core unit tests."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from cni.skel import CmdArgs, PluginFuncs, run_plugin
from cni.types import Result


@dataclass
class Run:
    """What one plugin invocation produced."""

    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict[str, Any]:
        out = json.loads(self.stdout)
        assert isinstance(out, dict)
        return out


@dataclass
class Recorder:
    """PluginFuncs whose calls are recorded; behaviour set per test."""

    calls: list[tuple[str, CmdArgs]] = field(default_factory=list)
    add_result: Result | None = None
    raise_exc: BaseException | None = None

    def _call(self, name: str, ca: CmdArgs) -> Result | None:
        self.calls.append((name, ca))
        if self.raise_exc is not None:
            raise self.raise_exc
        return self.add_result if name in ("add", "check") else None

    def funcs(self) -> PluginFuncs:
        return PluginFuncs(
            add=lambda ca: self._call("add", ca),
            del_=lambda ca: self._call("del", ca) and None,
            check=lambda ca: self._call("check", ca),
            status=lambda ca: self._call("status", ca) and None,
            gc=lambda ca: self._call("gc", ca) and None,
        )

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.calls]


def base_env(command: str, **extra: str) -> dict[str, str]:
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "3f2a8c1d9e00",
        "CNI_NETNS": "/var/run/netns/rc-does-not-exist",
        "CNI_IFNAME": "net1",
        "CNI_PATH": "/opt/cni/bin:/usr/lib/cni",
    }
    env.update(extra)
    return env


def netconf(version: str = "1.0.0", **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"cniVersion": version, "name": "rail1", "type": "sriov"}
    conf.update(extra)
    return conf


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def run_cni(
    recorder: Recorder,
) -> Iterator[Callable[..., Run]]:
    """Run a command in-process: ``run_cni(env, stdin_obj_or_bytes, **kwargs)``."""

    def run(
        env: Mapping[str, str],
        stdin: Any = b"",
        funcs: PluginFuncs | None = None,
        **kwargs: Any,
    ) -> Run:
        if isinstance(stdin, dict):
            stdin = json.dumps(stdin).encode()
        out, err = io.StringIO(), io.StringIO()
        code = run_plugin(
            funcs or recorder.funcs(),
            kwargs.pop("about", "railyard test plugin"),
            env=env,
            stdin=io.BytesIO(stdin),
            stdout=out,
            stderr=err,
            **kwargs,
        )
        return Run(code, out.getvalue(), err.getvalue())

    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield run
    # run_plugin removes its handlers; make sure nothing leaked into pytest.
    assert list(root.handlers) == handlers
    assert root.level == level
