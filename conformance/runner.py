# SPDX-License-Identifier: Apache-2.0
"""A black-box CNI runtime: execs plugin binaries the way libcni does.

Imports only the standard library and knows nothing of Railyard: a plugin is a
file named after its ``type`` in one of the CNI bin directories, driven through
``CNI_*`` environment variables and a JSON netconf on stdin, answering with one
JSON document on stdout. What libcni does, this does too:

- every plugin of a conflist gets the list's ``name`` and ``cniVersion``;
- ``runtimeConfig`` carries only the capability args the plugin declared in
  ``capabilities`` (and ``capabilities`` itself is left as written);
- ADD chains ``prevResult`` from one plugin to the next and caches the final
  result (``<cache>/results/<net>-<cid>-<ifname>``, libcni's cniCacheV1 shape);
- CHECK (>= 0.4.0, unless ``disableCheck``) and DEL (reverse order) get the
  cached ADD result as ``prevResult``; DEL removes the cache entry;
- GC first DELs every cached attachment of the network that is not in the
  valid list, then (>= 1.1.0) sends GC with ``cni.dev/valid-attachments``;
- STATUS (>= 1.1.0) stops at the first failing plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CACHE_KIND = "cniCacheV1"


def version_tuple(version: str) -> tuple[int, int, int]:
    """``"1.0.0"`` -> ``(1, 0, 0)``; raises ValueError for anything not semver."""
    parts = version.split(".")
    if len(parts) != 3:
        raise ValueError(f"not a semantic version: {version!r}")
    major, minor, patch = (int(p) for p in parts)
    return major, minor, patch


def at_least(version: str, minimum: str) -> bool:
    # A config without cniVersion is a 0.1.0 config (libcni's decoder).
    return version_tuple(version or "0.1.0") >= version_tuple(minimum)


@dataclass
class Execution:
    """One plugin process: what went in and what came out, undigested."""

    argv: list[str]
    env: dict[str, str]
    stdin: bytes
    returncode: int
    stdout: bytes
    stderr: bytes

    def json(self) -> Any:
        return json.loads(self.stdout)


class PluginError(Exception):
    """A plugin exited non-zero. ``error`` is its error JSON when it printed one."""

    def __init__(self, execution: Execution, error: dict[str, Any] | None) -> None:
        self.execution = execution
        self.error = error
        if error is not None:
            text = f"code {error.get('code')}: {error.get('msg')}"
            if error.get("details"):
                text += f" ({error['details']})"
        else:
            text = (
                f"exit {execution.returncode}, no error JSON on stdout; "
                f"stdout={execution.stdout[:200]!r} "
                f"stderr={execution.stderr[-400:]!r}"
            )
        super().__init__(f"{Path(execution.argv[-1]).name}: {text}")

    @property
    def code(self) -> int | None:
        return None if self.error is None else self.error.get("code")


class PluginNotFound(Exception):
    pass


@dataclass
class RuntimeConf:
    """libcni's RuntimeConf: the per-attachment arguments of one invocation."""

    container_id: str
    ifname: str
    netns: str = ""
    args: Sequence[tuple[str, str]] = ()
    capability_args: Mapping[str, Any] = field(default_factory=dict)


def gc_attachment(container_id: str, ifname: str) -> dict[str, str]:
    return {"containerID": container_id, "ifname": ifname}


class Runner:
    """Finds plugins in ``cni_path`` and runs ADD/CHECK/DEL/GC/STATUS/VERSION."""

    def __init__(
        self,
        cni_path: Iterable[str | Path],
        cache_dir: str | Path,
        *,
        exec_prefix: Sequence[str] = (),
        extra_env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.cni_path = [str(p) for p in cni_path]
        self.cache_dir = Path(cache_dir)
        # e.g. ["ip", "netns", "exec", "<host ns>"]: the plugin's own netns is
        # the "host" side of the attachment (how tests give host-device a host).
        self.exec_prefix = list(exec_prefix)
        self.extra_env = dict(extra_env or {})
        self.timeout = timeout
        self.history: list[Execution] = []  # every process run, for assertions

    # --- raw exec -----------------------------------------------------------------
    def find(self, plugin_type: str) -> Path:
        if not plugin_type or "/" in plugin_type:
            raise PluginNotFound(f"invalid plugin type {plugin_type!r}")
        for directory in self.cni_path:
            candidate = Path(directory) / plugin_type
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        raise PluginNotFound(
            f"failed to find plugin {plugin_type!r} in {self.cni_path}"
        )

    def cni_env(
        self, command: str, rt: RuntimeConf | None, *, omit: Iterable[str] = ()
    ) -> dict[str, str]:
        """The environment libcni's invoke.Args.AsEnv builds (minus ``omit``)."""
        env = dict(os.environ)
        env.update(self.extra_env)
        env["CNI_COMMAND"] = command
        env["CNI_PATH"] = os.pathsep.join(self.cni_path)
        if rt is not None:
            env["CNI_CONTAINERID"] = rt.container_id
            env["CNI_NETNS"] = rt.netns
            env["CNI_IFNAME"] = rt.ifname
            env["CNI_ARGS"] = ";".join(f"{k}={v}" for k, v in rt.args)
        for name in omit:
            env.pop(name, None)
        return env

    def execute(
        self, plugin_type: str, env: Mapping[str, str], stdin: bytes | str | dict
    ) -> Execution:
        """Run one plugin process; never raises for its exit status."""
        if isinstance(stdin, dict):
            stdin = json.dumps(stdin)
        if isinstance(stdin, str):
            stdin = stdin.encode()
        argv = [*self.exec_prefix, str(self.find(plugin_type))]
        proc = subprocess.run(
            argv,
            input=stdin,
            env=dict(env),
            capture_output=True,
            timeout=self.timeout,
            check=False,
        )
        ex = Execution(
            argv, dict(env), stdin, proc.returncode, proc.stdout, proc.stderr
        )
        self.history.append(ex)
        return ex

    def invoke(
        self, plugin_type: str, env: Mapping[str, str], stdin: bytes | str | dict
    ) -> tuple[Execution, Any]:
        """Run a plugin and digest its answer like libcni's invoke package.

        Returns the decoded stdout (None when empty); raises PluginError on a
        non-zero exit, with the error JSON when the plugin printed one.
        """
        ex = self.execute(plugin_type, env, stdin)
        if ex.returncode != 0:
            error: dict[str, Any] | None
            try:
                error = ex.json()
            except ValueError:
                error = None
            if not isinstance(error, dict):
                error = None
            raise PluginError(ex, error)
        if not ex.stdout.strip():
            return ex, None
        return ex, ex.json()

    # --- one network config ---------------------------------------------------------
    def version(self, plugin_type: str, stdin: bytes | str = b"") -> dict[str, Any]:
        env = self.cni_env("VERSION", None)
        _, out = self.invoke(plugin_type, env, stdin)
        return out

    @staticmethod
    def build_config(
        plugin: Mapping[str, Any],
        name: str,
        cni_version: str,
        prev_result: Any,
        rt: RuntimeConf | None,
    ) -> dict[str, Any]:
        conf = dict(plugin)
        conf["name"] = name
        conf["cniVersion"] = cni_version
        if prev_result is not None:
            conf["prevResult"] = prev_result
        if rt is not None:
            declared = conf.get("capabilities") or {}
            runtime_config = {
                cap: rt.capability_args[cap]
                for cap, enabled in declared.items()
                if enabled and cap in rt.capability_args
            }
            if runtime_config:
                conf["runtimeConfig"] = runtime_config
        return conf

    def add(self, netconf: Mapping[str, Any], rt: RuntimeConf) -> Any:
        """libcni AddNetwork: one plugin, result cached for CHECK and DEL."""
        return self.add_list(as_list(netconf), rt)

    def check(self, netconf: Mapping[str, Any], rt: RuntimeConf) -> None:
        self.check_list(as_list(netconf), rt)

    def delete(self, netconf: Mapping[str, Any], rt: RuntimeConf) -> None:
        self.del_list(as_list(netconf), rt)

    # --- conflists --------------------------------------------------------------------
    def add_list(self, conflist: Mapping[str, Any], rt: RuntimeConf) -> Any:
        name, version = conflist["name"], conflist.get("cniVersion", "")
        result = None
        for plugin in conflist["plugins"]:
            conf = self.build_config(plugin, name, version, result, rt)
            _, result = self.invoke(plugin["type"], self.cni_env("ADD", rt), conf)
        self._cache_write(conflist, rt, result)
        return result

    def check_list(self, conflist: Mapping[str, Any], rt: RuntimeConf) -> None:
        name, version = conflist["name"], conflist.get("cniVersion", "")
        if not at_least(version, "0.4.0"):
            raise ValueError(
                f'configuration version "{version}" does not support CHECK'
            )
        if str(conflist.get("disableCheck", "")).lower() == "true":
            return
        cached = self.cached_result(name, rt)
        for plugin in conflist["plugins"]:
            conf = self.build_config(plugin, name, version, cached, rt)
            self.invoke(plugin["type"], self.cni_env("CHECK", rt), conf)

    def del_list(self, conflist: Mapping[str, Any], rt: RuntimeConf) -> None:
        name, version = conflist["name"], conflist.get("cniVersion", "")
        cached = self.cached_result(name, rt) if at_least(version, "0.4.0") else None
        for plugin in reversed(conflist["plugins"]):
            conf = self.build_config(plugin, name, version, cached, rt)
            self.invoke(plugin["type"], self.cni_env("DEL", rt), conf)
        self._cache_path(name, rt).unlink(missing_ok=True)

    def gc_list(
        self,
        conflist: Mapping[str, Any],
        valid_attachments: Sequence[Mapping[str, str]],
    ) -> list[Exception]:
        """libcni GCNetworkList; returns the errors it collected (it continues)."""
        name, version = conflist["name"], conflist.get("cniVersion", "")
        valid = {(a["containerID"], a["ifname"]) for a in valid_attachments}
        errors: list[Exception] = []
        for cached in self.cached_attachments(name):
            if (cached["containerId"], cached["ifName"]) in valid:
                continue
            rt = RuntimeConf(
                container_id=cached["containerId"],
                ifname=cached["ifName"],
                netns=cached.get("netns", ""),
                args=[tuple(a) for a in cached.get("cniArgs") or []],
                capability_args=cached.get("capabilityArgs") or {},
            )
            try:
                self.del_list(conflist, rt)
            except (PluginError, PluginNotFound) as exc:
                errors.append(exc)
        if at_least(version, "1.1.0"):
            for plugin in conflist["plugins"]:
                conf = self.build_config(plugin, name, version, None, None)
                conf["cni.dev/valid-attachments"] = list(valid_attachments)
                try:
                    self.invoke(plugin["type"], self.cni_env("GC", None), conf)
                except (PluginError, PluginNotFound) as exc:
                    errors.append(exc)
        return errors

    def status_list(self, conflist: Mapping[str, Any]) -> None:
        name, version = conflist["name"], conflist.get("cniVersion", "")
        if not at_least(version, "1.1.0"):
            return
        for plugin in conflist["plugins"]:
            conf = self.build_config(plugin, name, version, None, None)
            self.invoke(plugin["type"], self.cni_env("STATUS", None), conf)

    # --- result cache (libcni's on-disk format) --------------------------------------
    def _cache_path(self, network: str, rt: RuntimeConf) -> Path:
        return self.cache_dir / "results" / f"{network}-{rt.container_id}-{rt.ifname}"

    def _cache_write(self, conflist: Mapping[str, Any], rt: RuntimeConf, result: Any):
        path = self._cache_path(conflist["name"], rt)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        entry = {
            "kind": CACHE_KIND,
            "containerId": rt.container_id,
            "config": json.dumps(conflist),
            "ifName": rt.ifname,
            "networkName": conflist["name"],
            "netns": rt.netns,
            "cniArgs": [list(a) for a in rt.args],
            "capabilityArgs": dict(rt.capability_args),
            "result": result,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry))
        tmp.chmod(0o600)
        tmp.replace(path)

    def cached_result(self, network: str, rt: RuntimeConf) -> Any:
        try:
            entry = json.loads(self._cache_path(network, rt).read_text())
        except (OSError, ValueError):
            return None  # libcni: a missing or unreadable cache means no prevResult
        return entry.get("result") if entry.get("kind") == CACHE_KIND else None

    def cached_attachments(self, network: str) -> list[dict[str, Any]]:
        found = []
        directory = self.cache_dir / "results"
        for path in sorted(directory.glob("*")) if directory.is_dir() else []:
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if entry.get("kind") == CACHE_KIND and entry.get("networkName") == network:
                found.append(entry)
        return found


def as_list(netconf: Mapping[str, Any]) -> dict[str, Any]:
    """A single netconf as a one-plugin conflist (libcni's ConfListFromConf)."""
    plugin = {k: v for k, v in netconf.items() if k not in ("name", "cniVersion")}
    return {
        "name": netconf["name"],
        "cniVersion": netconf.get("cniVersion", ""),
        "plugins": [plugin],
    }


def load_conf(path: str | Path) -> dict[str, Any]:
    """A netconf or conflist JSON file."""
    return json.loads(Path(path).read_text())
