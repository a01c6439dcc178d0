# SPDX-License-Identifier: Apache-2.0
"""A minimal libcni-like runtime: exec CNI plugins over a conflist.

What it does is what libcni does for a conflist (SPEC "Execution of Network
Configurations"): each plugin gets the network's ``name`` and ``cniVersion``, the
runtime config of the capabilities it declares, and on ADD the previous plugin's
result as ``prevResult``; DEL runs the plugins in reverse with the final ADD
result (cniVersion >= 0.4.0). Plugins are executed from a CNI bin dir with CNI_*
environment variables and the config on stdin; their stdout is the result or a
CNI error, which becomes ``PluginError``.

``plugin_bin_dir(lab)`` supplies the plugins under their CNI type names
(``sriov``, ``ib-sriov``, ``rdma``, and the IPAM-only ``railyard-ipam``): the
lab's launchers (``railyard_sim.launchers``).

Imports: standard library only at module level.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEBIAN_BIN = Path("/usr/lib/cni")
CAPABILITY_KEY = "capabilities"


class PluginError(Exception):
    """A plugin failed: its CNI error JSON (code, msg, details) and stderr."""

    def __init__(
        self,
        plugin: str,
        command: str,
        code: int,
        msg: str,
        details: str = "",
        stderr: str = "",
    ) -> None:
        super().__init__(
            f"{plugin} {command}: [{code}] {msg}" + (f": {details}" if details else "")
        )
        self.plugin = plugin
        self.command = command
        self.code = code
        self.msg = msg
        self.details = details
        self.stderr = stderr


@dataclass(frozen=True, slots=True)
class Attachment:
    """The spec's attachment identity plus where it lives."""

    container_id: str
    netns: str  # path; "" for DEL after the runtime lost it
    ifname: str
    args: Mapping[str, str] | None = None  # CNI_ARGS key/values
    capability_args: Mapping[str, Any] | None = None  # runtimeConfig sources


def plugin_bin_dir(lab_dir: Path | str) -> Path:
    """The lab's CNI bin dir: ``sriov``/``ib-sriov``/``rdma``/``railyard-ipam``
    launchers running this interpreter's plugins on that simulated host
    (``railyard_sim.launchers``); (re)written on every call."""
    from railyard_sim import launchers

    return launchers.write(Path(lab_dir) / launchers.BIN_DIR, lab_dir)


class Runtime:
    """Runs CNI commands of conflists against plugins found in ``bin_dirs``."""

    def __init__(
        self,
        bin_dirs: Sequence[Path | str],
        env: Mapping[str, str] | None = None,
        cache_dir: Path | str | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.bin_dirs = [Path(d) for d in bin_dirs]
        self.env = dict(env or {})
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.timeout = timeout

    # ------------------------------------------------------------ commands

    def add(self, conflist: Mapping[str, Any], att: Attachment) -> dict[str, Any]:
        """ADD every plugin in order, chaining ``prevResult``; the final result.

        Like libcni, a failed ADD is not undone here: the caller runs DEL.
        """
        prev: dict[str, Any] | None = None
        for plugin in conflist["plugins"]:
            conf = self._netconf(conflist, plugin, att, prev)
            prev = self.exec_plugin(plugin["type"], "ADD", conf, att)
        result = prev or {}
        self._cache_put(conflist, att, result)
        return result

    def delete(
        self,
        conflist: Mapping[str, Any],
        att: Attachment,
        prev_result: Mapping[str, Any] | None = None,
    ) -> None:
        """DEL every plugin in reverse order; the first error is raised at the end.

        As libcni does, DEL stops at the first failing plugin so a retry sees
        the same state; the cached ADD result is dropped only on success.
        """
        if prev_result is None:
            prev_result = self._cache_get(conflist, att)
        send_prev = prev_result if _ge(conflist, "0.4.0") else None
        for plugin in reversed(conflist["plugins"]):
            conf = self._netconf(conflist, plugin, att, send_prev)
            self.exec_plugin(plugin["type"], "DEL", conf, att)
        self._cache_drop(conflist, att)

    def check(
        self,
        conflist: Mapping[str, Any],
        att: Attachment,
        prev_result: Mapping[str, Any] | None = None,
    ) -> None:
        if prev_result is None:
            prev_result = self._cache_get(conflist, att)
        for plugin in conflist["plugins"]:
            conf = self._netconf(conflist, plugin, att, prev_result)
            self.exec_plugin(plugin["type"], "CHECK", conf, att)

    def status(self, conflist: Mapping[str, Any]) -> None:
        for plugin in conflist["plugins"]:
            conf = self._netconf(conflist, plugin, None, None)
            self.exec_plugin(plugin["type"], "STATUS", conf, None)

    def gc(self, conflist: Mapping[str, Any], valid: Sequence[tuple[str, str]]) -> None:
        """GC with ``cni.dev/valid-attachments`` = [(containerID, ifname)]."""
        attachments = [{"containerID": c, "ifname": i} for c, i in valid]
        for plugin in conflist["plugins"]:
            conf = self._netconf(conflist, plugin, None, None)
            conf["cni.dev/valid-attachments"] = attachments
            self.exec_plugin(plugin["type"], "GC", conf, None)

    def version(self, plugin_type: str) -> dict[str, Any]:
        return self.exec_plugin(plugin_type, "VERSION", {"cniVersion": "1.1.0"}, None)

    # -------------------------------------------------------------- exec

    def find(self, plugin_type: str) -> Path:
        for d in self.bin_dirs:
            candidate = d / plugin_type
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        dirs = ", ".join(str(d) for d in self.bin_dirs)
        raise FileNotFoundError(f"failed to find plugin {plugin_type!r} in [{dirs}]")

    def exec_plugin(
        self,
        plugin_type: str,
        command: str,
        conf: Mapping[str, Any],
        att: Attachment | None,
    ) -> dict[str, Any]:
        """Exec one plugin; its parsed stdout, or PluginError."""
        binary = self.find(plugin_type)
        # CNI_* of our own environment must not leak into the plugin's.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
        env = {
            **inherited,
            **self.env,
            "CNI_COMMAND": command,
            "CNI_PATH": os.pathsep.join(str(d) for d in self.bin_dirs),
        }
        if att is not None:
            env.update(
                CNI_CONTAINERID=att.container_id,
                CNI_NETNS=att.netns,
                CNI_IFNAME=att.ifname,
            )
            if att.args:
                env["CNI_ARGS"] = ";".join(f"{k}={v}" for k, v in att.args.items())
        try:
            proc = subprocess.run(
                [str(binary)],
                input=json.dumps(conf).encode(),
                env=env,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise PluginError(
                plugin_type, command, 999, f"no answer within {self.timeout:g}s"
            ) from exc
        out = proc.stdout.decode(errors="replace").strip()
        err = proc.stderr.decode(errors="replace")
        parsed: dict[str, Any] = {}
        if out:
            try:
                parsed = json.loads(out)
            except json.JSONDecodeError as exc:
                if proc.returncode == 0:
                    raise PluginError(
                        plugin_type,
                        command,
                        999,
                        "plugin printed a non-JSON result",
                        out,
                        err,
                    ) from exc
        if proc.returncode != 0:
            raise PluginError(
                plugin_type,
                command,
                int(parsed.get("code", 999) or 999),
                str(parsed.get("msg", f"exit status {proc.returncode}")),
                str(parsed.get("details", out if not parsed else "")),
                err,
            )
        return parsed

    # ----------------------------------------------------------- netconf

    def _netconf(
        self,
        conflist: Mapping[str, Any],
        plugin: Mapping[str, Any],
        att: Attachment | None,
        prev: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        conf = {k: v for k, v in plugin.items() if k != CAPABILITY_KEY}
        conf["name"] = conflist["name"]
        conf["cniVersion"] = conflist.get("cniVersion", "0.1.0")
        caps = plugin.get(CAPABILITY_KEY) or {}
        if att is not None and att.capability_args:
            runtime_config = {
                k: v for k, v in att.capability_args.items() if caps.get(k)
            }
            if runtime_config:
                conf["runtimeConfig"] = runtime_config
        if prev is not None:
            conf["prevResult"] = prev
        return conf

    # ------------------------------------------------------------- cache

    def _cache_path(self, conflist: Mapping[str, Any], att: Attachment) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / f"{conflist['name']}-{att.container_id}-{att.ifname}"

    def _cache_put(
        self, conflist: Mapping[str, Any], att: Attachment, result: Mapping[str, Any]
    ) -> None:
        path = self._cache_path(conflist, att)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result))

    def _cache_get(
        self, conflist: Mapping[str, Any], att: Attachment
    ) -> dict[str, Any] | None:
        path = self._cache_path(conflist, att)
        if path is None or not path.is_file():
            return None
        return dict(json.loads(path.read_text()))

    def _cache_drop(self, conflist: Mapping[str, Any], att: Attachment) -> None:
        path = self._cache_path(conflist, att)
        if path is not None:
            path.unlink(missing_ok=True)


def _ge(conflist: Mapping[str, Any], version: str) -> bool:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    return key(str(conflist.get("cniVersion", "0.1.0"))) >= key(version)
