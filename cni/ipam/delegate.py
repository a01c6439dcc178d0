# SPDX-License-Identifier: Apache-2.0
"""``DelegateIpam``: any foreign ``ipam.type`` executed from CNI_PATH per the spec.

SPEC.md "Delegated plugins": the plugin finds the binary named ``ipam.type`` in
CNI_PATH, runs it with the *same* environment (only CNI_COMMAND and, for the
attachment, CNI_CONTAINERID/CNI_IFNAME set to the call's values) and the
*whole* plugin config on stdin, and reads one result or error JSON from its
stdout (Go ``pkg/invoke`` / ``ipam.ExecAdd``). Used for host-local, static,
whereabouts, dhcp, ... — never for ``railyard``/``spiderpool`` (gRPC, in-process).

Mapping to the ``cni.ipam.IpamClient`` Protocol:

- ``allocate`` = ADD; the result (any version) -> ``IpamResult``. The full
  ``cni.types.Result`` is kept in ``last_result`` (dns, 1.1 route fields).
- ``release`` = DEL (idempotent in every reference IPAM plugin).
- ``check`` = CHECK with the config as given (it carries ``prevResult``); the
  addresses returned are prevResult's, since CHECK prints nothing.
- ``gc`` = GC with ``cni.dev/valid-attachments``; the delegate does not say
  how many it released, so the count returned is 0.
- ``status`` = STATUS.
- GC and STATUS exist from spec 1.1.0 on. When the config is older, or the
  delegate's VERSION does not list the config's version (Debian 12's
  host-local stops at 1.0.0), they are skipped with a log line: the spec says
  GC continues on errors, and an IPAM that has no STATUS cannot report one.
- A delegate's error JSON becomes ``IpamError`` with *its* code, msg and
  details; a crash without JSON becomes ``IpamError(101, ...)`` carrying the
  tail of its stderr. The delegate's stderr is logged (never our stdout).

Standard library only (subprocess); imports ``cni.types`` and ``cni.ipam``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cni import timings
from cni.errors import INVALID_CONFIG, IPAM_ERROR, TRY_AGAIN_LATER
from cni.ipam import (
    Attachment,
    Budget,
    IpamAddress,
    IpamError,
    IpamRequest,
    IpamResult,
    IpamRoute,
    check_plugin_type,
    time_left,
)
from cni.types import Result
from cni.version import GC_SINCE, config_version, greater_than_or_equal

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 60.0  # seconds per exec; below the command deadline
_STDERR_TAIL = 2000


def find_in_path(plugin: str, paths: Sequence[str]) -> Path:
    """First ``<dir>/<plugin>`` that is executable (Go ``invoke.FindInPath``).

    Raised errors are ``unchanged``: no delegate ran, nothing was allocated.
    """
    check_plugin_type(plugin)
    if not paths:
        raise IpamError(
            IPAM_ERROR, "no paths provided", "CNI_PATH is empty", unchanged=True
        )
    for d in paths:
        cand = Path(d) / plugin
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    raise IpamError(
        IPAM_ERROR,
        f'failed to find plugin "{plugin}" in path [{" ".join(paths)}]',
        unchanged=True,
    )


def to_ipam_result(result: Result) -> IpamResult:
    """Flatten a CNI Result into the plugin-facing IpamResult."""
    return IpamResult(
        ips=[
            IpamAddress(
                address=str(ip.address),
                gateway=str(ip.gateway) if ip.gateway is not None else None,
                version=ip.address.version,
            )
            for ip in result.ips
        ],
        routes=[
            IpamRoute(dst=str(r.dst), gw=str(r.gw) if r.gw is not None else None)
            for r in result.routes
        ],
        dns=dict(result.dns.to_json()),
    )


class DelegateIpam:
    """``IpamClient`` over a CNI IPAM binary (see module doc).

    Args:
        netconf: the whole plugin config as received on stdin (dict).
        env: the plugin's environment (CNI_PATH, CNI_NETNS, CNI_ARGS, ...).
        timeout: seconds per exec before the delegate is killed.
    """

    #: Any IPAM binary may use CNI_IFNAME in CNI_NETNS (dhcp does).
    uses_interface = True

    def __init__(
        self,
        netconf: Mapping[str, Any],
        env: Mapping[str, str],
        timeout: float | None = DEFAULT_TIMEOUT,
        budget: Budget | None = None,
    ) -> None:
        ipam = netconf.get("ipam")
        if not isinstance(ipam, Mapping) or not isinstance(ipam.get("type"), str):
            raise IpamError(INVALID_CONFIG, "IPAM config missing 'type' key")
        self.plugin_type: str = ipam["type"]
        self._budget = budget
        self.netconf = dict(netconf)
        self.env = dict(env)
        self.timeout = timeout
        self.paths = [p for p in self.env.get("CNI_PATH", "").split(os.pathsep) if p]
        self.last_result: Result | None = None
        self._versions: list[str] | None = None

    # ----------------------------------------------------------- plumbing

    @property
    def binary(self) -> Path:
        return find_in_path(self.plugin_type, self.paths)

    def exec(
        self,
        command: str,
        conf: Mapping[str, Any] | None = None,
        container_id: str | None = None,
        ifname: str | None = None,
    ) -> dict[str, Any] | None:
        """Run the delegate once; its stdout JSON object, or None when empty.

        Raises IpamError with the delegate's own code when it reports one.
        """
        binary = self.binary
        env = dict(self.env)
        env["CNI_COMMAND"] = command
        if container_id is not None:
            env["CNI_CONTAINERID"] = container_id
        if ifname is not None:
            env["CNI_IFNAME"] = ifname
        stdin = (
            b""
            if command == "VERSION"
            else json.dumps(dict(conf if conf is not None else self.netconf)).encode()
        )
        log.debug("ipam delegate: %s %s", command, binary)
        # The command's deadline bounds the delegate too: waiting on a child
        # blocks where the deadline's signal cannot end the wait cleanly.
        timeout = self.timeout
        left = time_left(
            self._budget, f"ipam plugin {self.plugin_type}", f"{command} not run"
        )
        if left is not None:
            timeout = left if timeout is None else min(timeout, left)
        try:
            proc = subprocess.run(
                [str(binary)],
                input=stdin,
                env=env,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise IpamError(
                TRY_AGAIN_LATER if timeout != self.timeout else IPAM_ERROR,
                f"ipam plugin {self.plugin_type} timed out",
                f"{command} did not finish within {timeout:g}s",
            ) from e
        except OSError as e:
            raise IpamError(
                IPAM_ERROR, f"failed to execute ipam plugin {self.plugin_type}", str(e)
            ) from e
        err_text = proc.stderr.decode(errors="replace").strip()
        if err_text:
            log.info("ipam %s %s stderr: %s", self.plugin_type, command, err_text)
        out_text = proc.stdout.decode(errors="replace").strip()
        parsed: Any = None
        if out_text:
            try:
                parsed = json.loads(out_text)
            except ValueError:
                parsed = None
        if proc.returncode != 0:
            if isinstance(parsed, dict) and isinstance(parsed.get("code"), int):
                raise IpamError(
                    parsed["code"],
                    str(parsed.get("msg", "")),
                    str(parsed.get("details", "")),
                )
            raise IpamError(
                IPAM_ERROR,
                f"ipam plugin {self.plugin_type} failed",
                f"{command} exited {proc.returncode}: "
                f"{(err_text or out_text)[-_STDERR_TAIL:]}",
            )
        if not out_text:
            return None
        if not isinstance(parsed, dict):
            raise IpamError(
                IPAM_ERROR,
                f"ipam plugin {self.plugin_type} printed invalid JSON",
                out_text[-_STDERR_TAIL:],
            )
        return parsed

    def supported_versions(self) -> list[str]:
        """The delegate's VERSION ``supportedVersions`` (cached)."""
        if self._versions is None:
            info = self.exec("VERSION") or {}
            raw = info.get("supportedVersions")
            self._versions = (
                [v for v in raw if isinstance(v, str)] if isinstance(raw, list) else []
            )
        return self._versions

    def _has_1_1_verbs(self, verb: str) -> bool:
        version = config_version(self.netconf)
        if not greater_than_or_equal(version, GC_SINCE):
            log.info(
                "ipam %s: config %s has no %s; skipped", self.plugin_type, version, verb
            )
            return False
        if version not in self.supported_versions():
            log.info(
                "ipam %s does not support %s (supports %s); %s skipped",
                self.plugin_type,
                version,
                self.supported_versions(),
                verb,
            )
            return False
        return True

    # ----------------------------------------------------- IpamClient API

    @timings.timed(timings.IPAM)
    def allocate(self, req: IpamRequest) -> IpamResult:
        """ADD: run the delegate for (req.container_id, req.ifname)."""
        out = self.exec("ADD", container_id=req.container_id, ifname=req.ifname)
        if out is None:
            raise IpamError(
                IPAM_ERROR, f"ipam plugin {self.plugin_type} returned no result"
            )
        try:
            result = Result.from_json(out, config_version(self.netconf))
        except Exception as e:  # CniError from decoding: report as IPAM's fault
            raise IpamError(
                IPAM_ERROR,
                f"ipam plugin {self.plugin_type} returned a bad result",
                str(e),
            ) from e
        self.last_result = result
        return to_ipam_result(result)

    @timings.timed(timings.IPAM)
    def release(self, network: str, container_id: str, ifname: str) -> None:
        """DEL for the attachment; the delegate treats "nothing held" as success."""
        self.exec("DEL", container_id=container_id, ifname=ifname)

    @timings.timed(timings.IPAM)
    def check(self, network: str, container_id: str, ifname: str) -> IpamResult:
        """CHECK against prevResult (in the config); returns prevResult's IPs."""
        self.exec("CHECK", container_id=container_id, ifname=ifname)
        prev = self.netconf.get("prevResult")
        if isinstance(prev, Mapping):
            return to_ipam_result(Result.from_json(prev, config_version(self.netconf)))
        return IpamResult()

    def gc(self, network: str, valid: Sequence[Attachment]) -> int:
        """GC with ``cni.dev/valid-attachments``; returns 0 (count unknown)."""
        if not self._has_1_1_verbs("GC"):
            return 0
        conf = dict(self.netconf)
        conf["cni.dev/valid-attachments"] = [
            {"containerID": a.container_id, "ifname": a.ifname} for a in valid
        ]
        self.exec("GC", conf=conf)
        return 0

    def status(self) -> None:
        """STATUS; raises IpamError with the delegate's code (50/51) if not ready."""
        if not self._has_1_1_verbs("STATUS"):
            return
        self.exec("STATUS")

    def close(self) -> None:
        """Nothing to close: every call is its own process."""
