# SPDX-License-Identifier: Apache-2.0
"""Cold-start hygiene: what a plugin process imports, by path.

Runtimes such as podman exec VERSION before every ADD and DEL, so VERSION and
config errors must load nothing third-party; pyroute2/pyudev/grpc arrive only
with the adapters inside ``real_deps()``, and sqlalchemy/click never load in a
plugin process. Each case runs in a fresh interpreter and reports its
``sys.modules``; modules the interpreter loads before any of our code (site,
.pth hooks) are subtracted as a baseline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cni.plugins.registry import PLUGINS

PLUGIN_MAINS = [f"{p.package}.__main__" for p in PLUGINS.values()]
HEAVY = {"pyroute2", "grpc", "pyudev", "sqlalchemy", "click", "google", "yaml"}
# ipamd: only its import-free API package (the release string) may load.
OURS = {"cni", "ipamd"}

# Run in the child: call the module's main() like the console script does,
# then write the loaded top-level module names to $HYGIENE_OUT.
CHILD = """
import importlib, json, os, sys
target, how = sys.argv[1], sys.argv[2]
sys.argv = [sys.argv[0]]
code = None
try:
    if how == "main":
        importlib.import_module(target).main()
    elif how == "import":
        importlib.import_module(target)
    elif how == "skel-version":
        from cni.skel import PluginFuncs, run_plugin
        code = run_plugin(PluginFuncs(lambda ca: None, lambda ca: None), "hygiene")
    elif how == "skel-lazy":
        # A plugin main handing skel a factory: the commands load only when a
        # command is about to run.
        from cni.skel import run_plugin
        code = run_plugin(
            lambda: importlib.import_module(target).plugin_funcs(), "hygiene"
        )
except SystemExit as e:
    code = e.code
with open(os.environ["HYGIENE_OUT"], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def _run(
    tmp_path: Path, target: str, how: str, env: dict[str, str], stdin: str = ""
) -> tuple[object, set[str], str, list[str]]:
    out = tmp_path / f"modules-{len(list(tmp_path.iterdir()))}.json"
    full_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HYGIENE_OUT": str(out),
        "RAILYARD_STATE_DIR": str(tmp_path / "state"),
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, target, how],
        input=stdin,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.exists(), f"child failed before reporting: {proc.stderr}"
    report = json.loads(out.read_text())
    tops = {m.split(".")[0] for m in report["modules"]}
    return report["code"], tops, proc.stdout, report["modules"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Top-level modules loaded by the bare interpreter (site, .pth files)."""
    tmp = tmp_path_factory.mktemp("baseline")
    _, tops, _, _ = _run(tmp, "json", "import", {})
    return tops


def third_party(tops: set[str], baseline: set[str]) -> set[str]:
    return {
        m
        for m in tops - baseline
        if m not in sys.stdlib_module_names and m not in OURS and m != "__main__"
    }


def test_skel_version_imports_nothing_third_party(tmp_path, baseline):
    code, tops, stdout, _ = _run(
        tmp_path, "cni.skel", "skel-version", {"CNI_COMMAND": "VERSION"}
    )
    assert code == 0
    assert json.loads(stdout)["supportedVersions"]
    assert third_party(tops, baseline) == set()


ADD_ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "hygiene0001",
    "CNI_NETNS": "/var/run/netns/rc-hygiene-missing",
    "CNI_IFNAME": "net1",
    "CNI_PATH": "/usr/lib/cni",
}

# What a plugin's VERSION needs is the skeleton alone: none of the result model,
# the IPAM records, CNI_ARGS parsing or the plugin's commands.
NOT_FOR_VERSION = {"cni.types", "cni.ipam", "cni.args", "cni.attach", "cni.kernel"}


def test_skel_version_loads_only_the_skeleton(tmp_path):
    _, _, stdout, modules = _run(
        tmp_path, "cni.skel", "skel-version", {"CNI_COMMAND": "VERSION"}
    )
    assert json.loads(stdout)["supportedVersions"]
    assert [m for m in modules if m.startswith(tuple(NOT_FOR_VERSION))] == []


@pytest.mark.parametrize(
    "commands",
    [
        "cni.plugins.sriov.commands",
        "cni.plugins.ib_sriov.commands",
        "cni.plugins.rdma.commands",
    ],
)
@pytest.mark.parametrize(
    ("env", "stdin"),
    [
        pytest.param({"CNI_COMMAND": "VERSION"}, "", id="version"),
        pytest.param(ADD_ENV, "{not json", id="undecodable"),
        pytest.param(ADD_ENV, '{"cniVersion": "1.0.0"}', id="no-name"),
        pytest.param(ADD_ENV, '{"cniVersion": "9.9.9", "name": "r"}', id="bad-version"),
    ],
)
def test_lazy_plugin_funcs_are_not_loaded_before_a_command_runs(
    tmp_path, commands, env, stdin
):
    code, _, stdout, modules = _run(tmp_path, commands, "skel-lazy", env, stdin)
    if env["CNI_COMMAND"] == "VERSION":
        assert code == 0 and "1.1.0" in json.loads(stdout)["supportedVersions"]
    else:
        assert code == 1 and json.loads(stdout)["code"] in {1, 6, 7}
    assert commands not in modules
    assert [m for m in modules if m.startswith(("cni.attach", "cni.kernel"))] == []


def test_lazy_plugin_funcs_load_when_the_command_runs(tmp_path):
    # The same factory does load the plugin once a command gets past skel's
    # checks (here the sriov config validation rejects it: code 7).
    stdin = '{"cniVersion": "1.0.0", "name": "rail1", "type": "sriov"}'
    code, _, stdout, modules = _run(
        tmp_path, "cni.plugins.sriov.commands", "skel-lazy", ADD_ENV, stdin
    )
    assert code == 1 and json.loads(stdout)["code"] == 7
    assert "cni.plugins.sriov.commands" in modules


@pytest.mark.parametrize(
    "module",
    [
        "cni.skel",
        "cni.types",
        "cni.version",
        "cni.args",
        "cni.deadline",
        "cni.logs",
        "cni.rollback",
        "cni.state.cache",
        "cni.state.locks",
        "cni.ipam.delegate",
    ],
)
def test_core_modules_import_nothing_third_party(tmp_path, baseline, module):
    _, tops, _, _ = _run(tmp_path, module, "import", {})
    assert third_party(tops, baseline) == set()


@pytest.mark.parametrize("module", PLUGIN_MAINS)
def test_plugin_version_imports_nothing_third_party(tmp_path, baseline, module):
    code, tops, stdout, modules = _run(
        tmp_path, module, "main", {"CNI_COMMAND": "VERSION"}
    )
    assert code in (0, None)
    assert "1.1.0" in json.loads(stdout)["supportedVersions"]
    assert third_party(tops, baseline) == set()
    # Of ipamd, only the import-free module holding the release string.
    ipamd_modules = {m for m in modules if m.split(".")[0] == "ipamd"}
    assert ipamd_modules <= {
        "ipamd",
        "ipamd.api",
        "ipamd.api.v1",
        "ipamd.api.v1.version",
    }


# tempfile drags in shutil, random, bz2 and lzma (~8 ms); the state cache
# writes its temporary file with os.open instead.
HEAVY_STDLIB = {"tempfile", "shutil", "bz2", "lzma"}


@pytest.mark.parametrize("module", PLUGIN_MAINS)
def test_plugin_version_loads_no_tempfile_or_compression_modules(tmp_path, module):
    code, _, _, modules = _run(tmp_path, module, "main", {"CNI_COMMAND": "VERSION"})
    assert code in (0, None)
    assert HEAVY_STDLIB & set(modules) == set()


@pytest.mark.parametrize("module", PLUGIN_MAINS)
def test_plugin_version_never_loads_the_plugin_commands(tmp_path, module):
    """Runtimes probe VERSION before every ADD and DEL: skel answers it from
    the entry point alone, before the command module is imported."""
    code, _, _, modules = _run(tmp_path, module, "main", {"CNI_COMMAND": "VERSION"})
    assert code in (0, None)
    loaded = [m for m in modules if m.startswith(("cni.attach", "cni.kernel"))]
    assert loaded == []
    assert not any(m.endswith(".commands") for m in modules)


@pytest.mark.parametrize("module", PLUGIN_MAINS)
@pytest.mark.parametrize(
    ("stdin", "codes"),
    [
        pytest.param("{not json", {6}, id="undecodable"),
        pytest.param('{"cniVersion": "1.0.0", "type": "x"}', {7}, id="no-name"),
        pytest.param('{"cniVersion": "9.9.9", "name": "rail1"}', {1}, id="bad-version"),
        # Valid JSON, but none of the plugin's own required fields: the plugin's
        # config validation must reject it before building any dependency.
        pytest.param(
            '{"cniVersion": "1.0.0", "name": "rail1", "type": "x"}',
            {2, 7},
            id="plugin-config",
        ),
    ],
)
def test_plugin_add_with_invalid_config_loads_no_heavy_module(
    tmp_path, baseline, module, stdin, codes
):
    code, tops, stdout, _ = _run(tmp_path, module, "main", ADD_ENV, stdin)
    assert code == 1
    assert json.loads(stdout)["code"] in codes, stdout
    assert tops & HEAVY == set()
    assert third_party(tops, baseline) == set()


@pytest.mark.parametrize("module", PLUGIN_MAINS)
def test_plugin_del_never_loads_the_daemons_database_or_cli(tmp_path, module):
    # A DEL with nothing to undo (no cache, netns already gone, a PCI address
    # that does not exist) goes past config validation into the real command
    # path, its production adapters built; the daemon's SQL store and CLI must
    # not load there, nor pyroute2 (~150 ms of import, for RDMA devices only).
    conf = {
        "cniVersion": "1.0.0",
        "name": "rail1",
        "type": "x",
        "deviceID": "0000:ff:1f.7",
        # No ipamd: the client retries for its timeout, then DEL fails code 11.
        "ipam": {
            "type": "railyard",
            "socket": str(tmp_path / "no-ipamd.sock"),
            "timeout": 1,
        },
    }
    env = {
        "CNI_COMMAND": "DEL",
        "CNI_CONTAINERID": "hygiene0002",
        "CNI_NETNS": "",
        "CNI_IFNAME": "net1",
        "CNI_PATH": "/usr/lib/cni",
        "RAILYARD_IPAMD_SOCKET": str(tmp_path / "no-ipamd.sock"),
        "RAILYARD_DEADLINE": "20",
    }
    _, tops, stdout, modules = _run(tmp_path, module, "main", env, json.dumps(conf))
    assert not stdout or json.loads(stdout)  # at most one JSON document
    assert {"sqlalchemy", "click", "prometheus_client", "pyroute2"} & tops == set()
    daemon_side = [
        m for m in modules if m.startswith("ipamd.store") or m == "ipamd.cli"
    ]
    assert daemon_side == []


@pytest.mark.parametrize(
    "module",
    [
        # What the node agent loads before it forks its workers and its
        # reconcile, and the cluster CLI's module with the gc command: the
        # Kubernetes client is imported only when `railyard gc` or the webhook
        # reads the API.
        "cni.agent.plugins",
        "cni.agent.reconcile",
        "cni.agent.cli",
        "railyard.cli",
        "railyard.gc",
    ],
)
def test_the_kubernetes_client_stays_off_the_agent_and_the_cli_import(tmp_path, module):
    _, tops, _, _ = _run(tmp_path, module, "import", {})
    assert {"kubernetes", "urllib3"} & tops == set()
