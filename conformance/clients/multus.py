# SPDX-License-Identifier: Apache-2.0
"""Multus's delegation, reproduced: what a delegate plugin sees under Multus.

There is no Kubernetes here, so this harness does what multus-cni does between
reading a pod's NetworkAttachmentDefinitions and exec'ing their plugins
(multus-cni ``pkg/types/conf.go``: LoadDelegateNetConf, addDeviceIDInConfList,
delegateAddDeviceID, mergeCNIRuntimeConfig, newCNIRuntimeConf; ``pkg/multus``:
delegateAdd/delPlugins), and then what libcni does for each delegate:

- the NAD's config is the delegate, a conflist or a single plugin config, sent
  with its own ``cniVersion`` and ``name`` (libcni copies both into every plugin);
- a deviceID from the device plugin (kubelet's resource map) is injected as the
  top-level keys ``deviceID`` **and** ``pciBusID`` into every plugin of the
  conflist (or into the single config);
- CNI_ARGS is ``IgnoreUnknown=true;K8S_POD_NAMESPACE=..;K8S_POD_NAME=..;
  K8S_POD_INFRA_CONTAINER_ID=..;K8S_POD_UID=..``, in that order;
- capability args come from the network-selection element (``mac``, ``ips``,
  ``infiniband-guid`` -> ``infinibandGUID``) plus ``deviceID`` and an automatic
  ``CNIDeviceInfoFile`` whenever a deviceID exists; libcni puts into a plugin's
  ``runtimeConfig`` only those the plugin declares in ``capabilities``;
- CNI_IFNAME is the element's ``interface`` or ``net<N>`` (N = 1-based position);
- ADD runs the delegates in order, each conflist's plugins in order with
  ``prevResult`` chained; results are cached (libcni cniCacheV1) and DEL runs
  the delegates in reverse, each conflist's plugins in reverse, with the cached
  result as ``prevResult`` (>= 0.4.0). An ADD failure DELs every delegate up to
  and including the failed one, as Multus's cmdAdd does.

Imports: standard library only (it must know nothing of Railyard).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The capabilities Multus can fill from a selection element or the resource map.
_CAPABILITIES = (
    "portMappings",
    "bandwidth",
    "ips",
    "mac",
    "infinibandGUID",
    "deviceID",
    "CNIDeviceInfoFile",
)
DEVICE_INFO_DIR = "/var/run/k8s.cni.cncf.io/devinfo/cni"


class DelegateError(RuntimeError):
    """A delegate plugin failed; ``error`` is its CNI error JSON."""

    def __init__(self, plugin: str, command: str, error: Any, stderr: str) -> None:
        super().__init__(f"{plugin} {command} failed: {error} {stderr[-1500:]}")
        self.error = error


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    sandbox_id: str  # the infra (pause) container ID, also CNI_CONTAINERID
    netns: str


@dataclass(frozen=True)
class Attachment:
    """A NetworkAttachmentDefinition plus the pod's selection element for it."""

    nad_namespace: str
    nad_name: str
    config: dict[str, Any]  # spec.config of the NAD, parsed
    resource_device_id: str = ""  # from kubelet's pod-resources (device plugin)
    interface: str = ""
    mac: str = ""
    ips: tuple[str, ...] = ()
    infiniband_guid: str = ""
    device_id: str = ""  # "deviceID" of the selection element


@dataclass
class Call:
    """One exec of a delegate plugin, as the plugin saw it."""

    plugin: str
    command: str
    env: dict[str, str]
    stdin: dict[str, Any]
    result: Any = None  # the stdout JSON: a result, or an error
    returncode: int = 0


@dataclass
class Multus:
    cni_path: Sequence[Path]
    cache_dir: Path  # libcni's CacheDir (Multus: /var/lib/cni/multus)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    calls: list[Call] = field(default_factory=list)

    # ------------------------------------------------------------ multus

    def delegate_config(self, att: Attachment) -> dict[str, Any]:
        """The NAD config after Multus's deviceID injection (LoadDelegateNetConf)."""
        conf = copy.deepcopy(att.config)
        if att.resource_device_id:
            plugins = conf["plugins"] if "plugins" in conf else [conf]
            for plugin in plugins:
                plugin["deviceID"] = att.resource_device_id
                plugin["pciBusID"] = att.resource_device_id
        return conf

    def capability_args(self, pod: Pod, att: Attachment, ifname: str) -> dict[str, Any]:
        """mergeCNIRuntimeConfig + newCNIRuntimeConf for a non-master delegate."""
        caps: dict[str, Any] = {}
        if att.ips:
            caps["ips"] = list(att.ips)
        if att.mac:
            caps["mac"] = att.mac
        if att.infiniband_guid:
            caps["infinibandGUID"] = att.infiniband_guid
        # the resource map wins; the element's deviceID only fills a gap
        device = att.resource_device_id or att.device_id
        if device:
            caps["deviceID"] = device
            name = f"{att.nad_namespace}/{att.nad_name}"
            auto = f"{name}-{pod.sandbox_id}_{ifname}".replace("/", "-")
            caps["CNIDeviceInfoFile"] = f"{DEVICE_INFO_DIR}/{auto}"
        return caps

    @staticmethod
    def cni_args(pod: Pod) -> str:
        return (
            f"IgnoreUnknown=true;K8S_POD_NAMESPACE={pod.namespace};"
            f"K8S_POD_NAME={pod.name};K8S_POD_INFRA_CONTAINER_ID={pod.sandbox_id};"
            f"K8S_POD_UID={pod.uid}"
        )

    @staticmethod
    def ifname(att: Attachment, index: int) -> str:
        return att.interface or f"net{index}"

    def add(self, pod: Pod, attachments: Sequence[Attachment]) -> list[Any]:
        """ADD every delegate in order; on a failure, DEL those tried and raise."""
        results = []
        for idx, att in enumerate(attachments):
            try:
                results.append(self._delegate("ADD", pod, att, idx + 1))
            except DelegateError:
                for back in range(idx, -1, -1):
                    self._delegate("DEL", pod, attachments[back], back + 1, check=False)
                raise
        return results

    def delete(
        self, pod: Pod, attachments: Sequence[Attachment], check: bool = True
    ) -> None:
        """DEL every delegate in reverse order (Multus cmdDel -> delPlugins)."""
        errors = []
        for idx in range(len(attachments) - 1, -1, -1):
            try:
                self._delegate("DEL", pod, attachments[idx], idx + 1, check=check)
            except DelegateError as exc:
                errors.append(exc)  # Multus goes on with the other delegates
        if errors:
            raise errors[0]

    # ------------------------------------------------------------ libcni

    def _delegate(
        self, command: str, pod: Pod, att: Attachment, index: int, check: bool = True
    ) -> Any:
        conf = self.delegate_config(att)
        ifname = self.ifname(att, index)
        caps = self.capability_args(pod, att, ifname)
        plugins = conf["plugins"] if "plugins" in conf else [conf]
        version = str(conf.get("cniVersion", "0.1.0"))
        name = str(conf["name"])
        cache = self.cache_dir / "results" / f"{name}-{pod.sandbox_id}-{ifname}"
        env = {
            **self.env,
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": pod.sandbox_id,
            "CNI_NETNS": pod.netns,
            "CNI_IFNAME": ifname,
            "CNI_ARGS": self.cni_args(pod),
            "CNI_PATH": ":".join(str(p) for p in self.cni_path),
        }
        if command == "ADD":
            prev: Any = None
            for plugin in plugins:
                prev = self._exec(
                    self._net_conf(plugin, name, version, caps, prev), env, check
                )
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(
                json.dumps(
                    {
                        "kind": "cniCacheV1",
                        "containerId": pod.sandbox_id,
                        "ifName": ifname,
                        "networkName": name,
                        "config": conf,
                        "result": prev,
                    }
                )
            )
            return prev
        cached = json.loads(cache.read_text())["result"] if cache.exists() else None
        with_prev = _version(version) >= (0, 4, 0) and cached is not None
        failure: DelegateError | None = None
        for plugin in reversed(plugins):
            try:
                self._exec(
                    self._net_conf(
                        plugin, name, version, caps, cached if with_prev else None
                    ),
                    env,
                    check,
                )
            except DelegateError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        cache.unlink(missing_ok=True)
        return None

    @staticmethod
    def _net_conf(
        plugin: Mapping[str, Any],
        name: str,
        version: str,
        caps: Mapping[str, Any],
        prev: Any,
    ) -> dict[str, Any]:
        """libcni buildOneConfig: name, cniVersion, declared runtimeConfig, prev."""
        conf = dict(plugin)
        conf["name"] = name
        conf["cniVersion"] = version
        declared = conf.get("capabilities") or {}
        runtime = {
            k: v for k, v in caps.items() if declared.get(k) and k in _CAPABILITIES
        }
        if runtime:
            conf["runtimeConfig"] = runtime
        if prev is not None:
            conf["prevResult"] = prev
        return conf

    def _exec(self, conf: dict[str, Any], env: dict[str, str], check: bool) -> Any:
        plugin = str(conf["type"])
        exe = next((p / plugin for p in self.cni_path if (p / plugin).is_file()), None)
        if exe is None:
            raise DelegateError(
                plugin,
                env["CNI_COMMAND"],
                f"failed to find plugin {plugin!r} in {self.cni_path}",
                "",
            )
        proc = subprocess.run(
            [str(exe)],
            input=json.dumps(conf).encode(),
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        out = json.loads(proc.stdout) if proc.stdout.strip() else None
        self.calls.append(
            Call(plugin, env["CNI_COMMAND"], env, conf, out, proc.returncode)
        )
        if proc.returncode != 0 and check:
            raise DelegateError(
                plugin, env["CNI_COMMAND"], out, proc.stderr.decode(errors="replace")
            )
        return out


def _version(raw: str) -> tuple[int, ...]:
    return tuple(int(x) for x in raw.split("."))
