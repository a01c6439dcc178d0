# SPDX-License-Identifier: Apache-2.0
"""Every plugin has one shape: the same files, signatures, binding and GC policy."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from cni.errors import DEVICE_ERROR, INVALID_CONFIG, CniError
from cni.netconf_fields import is_pci_address
from cni.plugins import binding, registry
from cni.skel import CmdArgs

PLUGINS = sorted(registry.PLUGINS)
FILES = {"__init__.py", "__main__.py", "config.py", "commands.py", "README.md"}


def package_dir(cni_type: str) -> Path:
    spec = importlib.util.find_spec(registry.plugin(cni_type).package)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


def test_the_registry_knows_the_four_plugins_by_cni_type() -> None:
    assert PLUGINS == ["ib-sriov", "railyard-ipam", "rdma", "sriov"]


@pytest.mark.parametrize("cni_type", PLUGINS)
def test_each_plugin_has_the_same_files(cni_type: str) -> None:
    present = {p.name for p in package_dir(cni_type).iterdir()}
    assert FILES <= present


@pytest.mark.parametrize("cni_type", PLUGINS)
def test_each_plugin_has_the_same_signatures(cni_type: str) -> None:
    package = registry.plugin(cni_type).package
    config = importlib.import_module(f"{package}.config")
    commands = importlib.import_module(f"{package}.commands")
    assert list(inspect.signature(config.load_conf).parameters) == ["args"]
    for name in ("add", "delete", "check", "status", "gc"):
        params = list(inspect.signature(getattr(commands, name)).parameters)
        assert len(params) == 4, (name, params)
        assert params[0] in ("args", "ca") and params[2:] == ["deps", "ipam"]
    assert list(inspect.signature(commands.plugin_funcs).parameters) == [
        "make_deps",
        "make_ipam",
    ]
    assert commands.COMMANDS.load_conf is config.load_conf


@pytest.mark.parametrize("cni_type", PLUGINS)
def test_each_readme_has_a_configuration_reference(cni_type: str) -> None:
    text = (package_dir(cni_type) / "README.md").read_text()
    assert "## Configuration reference" in text
    assert f"`{cni_type}`" in text.splitlines()[0]


class Closing:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def args_for(command: str, conf: dict[str, Any]) -> CmdArgs:
    return CmdArgs(command=command, stdin_data=json.dumps(conf).encode(), netconf=conf)


def recording_commands(
    load: Any, fail: bool = False
) -> tuple[binding.Commands[Any], list[Any]]:
    """Commands that record (command, conf, deps, ipam) per call, or fail."""

    def run(args: CmdArgs, conf: Any, deps: Any, ipam: Any) -> None:
        if fail:
            raise CniError(DEVICE_ERROR, "step failed")
        seen.append((args.command, conf, deps, ipam))

    seen: list[Any] = []
    cmds = binding.Commands(
        load_conf=load,
        add=run,
        delete=run,
        check=run,
        status=run,
        gc=run,
        deps_in={binding.ADD},
        ipam_in={binding.ADD, binding.DEL},
    )
    return cmds, seen


def test_a_config_error_is_raised_before_any_factory_runs() -> None:
    def load(args: CmdArgs) -> None:
        raise CniError(INVALID_CONFIG, "bad config")

    def never(*_: Any) -> Any:
        raise AssertionError("factory called before the config was validated")

    funcs = binding.bind(recording_commands(load)[0], never, never)
    with pytest.raises(CniError) as info:
        funcs.add(args_for("ADD", {"name": "n"}))
    assert info.value.code == INVALID_CONFIG


def test_deps_and_ipam_are_built_only_where_declared_and_always_closed() -> None:
    made: list[Closing] = []

    def make(*_: Any) -> Closing:
        made.append(Closing())
        return made[-1]

    cmds, seen = recording_commands(lambda args: "conf")
    funcs = binding.bind(cmds, make, make)
    funcs.add(args_for("ADD", {}))
    funcs.del_(args_for("DEL", {}))
    assert funcs.status is not None
    funcs.status(args_for("STATUS", {}))
    assert [(c, d is not None, i is not None) for c, _, d, i in seen] == [
        ("ADD", True, True),
        ("DEL", False, True),
        ("STATUS", False, False),
    ]
    assert len(made) == 3 and all(m.closed for m in made)

    made.clear()
    failing = binding.bind(recording_commands(lambda a: "c", True)[0], make, make)
    with pytest.raises(CniError):
        failing.add(args_for("ADD", {}))
    assert len(made) == 2 and all(m.closed for m in made)


def test_gc_policy_reports_every_failure_after_going_on() -> None:
    binding.gc_failed([])  # nothing failed: GC succeeds
    with pytest.raises(CniError) as info:
        binding.gc_failed(["c1/net1: busy", "c2/net2: gone"])
    assert info.value.code == DEVICE_ERROR and info.value.msg == "GC incomplete"
    assert info.value.details == "c1/net1: busy; c2/net2: gone"


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("0000:af:00.2", True),
        ("0000:AF:1f.7", True),
        ("af:00.2", False),
        ("0000:af:00.8", False),
        ("0000:af:00.2 ", False),
        ("mlx5_core.sf.4", False),
    ],
)
def test_one_pci_address_validator(value: str, valid: bool) -> None:
    assert is_pci_address(value) is valid


def test_registry_funcs_factory_builds_nothing_until_called() -> None:
    factory = registry.funcs_factory("rdma")
    funcs = factory()
    assert callable(funcs.add) and callable(funcs.gc)
    assert registry.plugin("railyard-ipam").about.startswith("railyard ipam ")
    with pytest.raises(KeyError, match="known: ib-sriov, railyard-ipam"):
        registry.plugin("macvlan")
