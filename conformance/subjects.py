# SPDX-License-Identifier: Apache-2.0
"""The plugins the spec cases judge ("subjects") and the host each one needs.

Standard library only, and black-box: a subject is a CNI bin directory, a
netconf and the environment the binary needs (a device to move, a netns, for
our plugins the simulated host started through the installed ``railyard-sim``
and ``ipamd`` commands). Nothing here imports Railyard.

- ``host-device`` + ``host-local`` (Debian's Go reference plugins): the suite
  must judge them correctly, or the suite is wrong. host-device runs inside a
  private "host" netns holding a veth made for each attachment.
- ``sriov``, ``ib-sriov``: a VF of the lab (a veth stand-in) per attachment,
  IPAM from a private ipamd on a unix socket.
- ``rdma``: chained after ``sriov`` as on a node (``[sriov, rdma]``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from conformance import netns
from conformance.runner import Runner, RuntimeConf

KNOWN_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
CASES = Path(__file__).resolve().parent / "cases"


def load_case(name: str, **values: str) -> dict[str, Any]:
    """``cases/<name>.json`` with its ``${PLACEHOLDERS}`` filled in (all required)."""
    text = Template((CASES / f"{name}.json").read_text())
    return json.loads(text.substitute({k: json_str(v) for k, v in values.items()}))


def json_str(value: str) -> str:
    # Substituted inside JSON strings: escape like JSON would.
    return json.dumps(str(value))[1:-1]


@dataclass
class Attachment:
    """One (container, ifname) attachment being exercised, and its sandbox."""

    subject: Subject
    runner: Runner
    conflist: dict[str, Any]
    rt: RuntimeConf
    netns_name: str
    private: dict[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> str:
        return self.conflist["cniVersion"]

    @property
    def plugin_type(self) -> str:
        return self.subject.plugin_type

    def plugin_conf(self, prev_result: Any = None) -> dict[str, Any]:
        """stdin for the plugin under test (the list's last plugin), libcni-built."""
        return Runner.build_config(
            self.conflist["plugins"][-1],
            self.conflist["name"],
            self.version,
            prev_result,
            self.rt,
        )

    def env(self, command: str, **overrides: str) -> dict[str, str]:
        env = self.runner.cni_env(command, self.rt)
        env.update(overrides)
        return env

    def vanish_netns(self) -> None:
        """Make the pod's netns disappear the way the runtime's teardown does."""
        self.subject.vanish_netns(self)


class Subject:
    """A plugin under test. Subclasses describe its host and its netconf."""

    name: str = ""
    plugin_type: str = ""
    reference = False  # a Go reference plugin (expected deviations are data)
    attaches = True  # puts CNI_IFNAME into the netns (IPAM plugins do not)
    ifname = "net1"

    def __init__(self, bin_dirs: list[Path], workdir: Path) -> None:
        self.bin_dirs = bin_dirs
        self.workdir = workdir
        self._versions: list[str] | None = None

    def runner(self, **kw: Any) -> Runner:
        return Runner(self.bin_dirs, self.workdir / "cache", **kw)

    def supported_versions(self) -> list[str]:
        if self._versions is None:
            self._versions = list(
                self.runner().version(self.plugin_type)["supportedVersions"]
            )
        return self._versions

    def supports(self, version: str) -> bool:
        return version in self.supported_versions()

    def highest_version(self) -> str:
        return max(
            (v for v in self.supported_versions() if v in KNOWN_VERSIONS),
            key=lambda v: tuple(int(x) for x in v.split(".")),
        )

    @contextmanager
    def attachment(self, version: str | None = None) -> Iterator[Attachment]:
        raise NotImplementedError

    def vanish_netns(self, att: Attachment) -> None:
        netns.del_netns(att.netns_name)

    def assert_released(self, att: Attachment) -> None:
        """Black-box evidence that DEL gave everything back (subject-specific)."""

    def without_backend(self, conf: dict[str, Any]) -> dict[str, Any] | None:
        """``conf`` pointed at a dead backend (IPAM daemon), if the plugin has one."""
        return None

    def assert_gc_released(self, att: Attachment) -> None:
        """Evidence that GC reclaimed an attachment the runtime forgot."""
        raise AssertionError(f"{self.name}: no way to observe what GC released")

    def close(self) -> None:
        """Tear down session-wide resources."""


# --------------------------------------------------------------- Go references


class HostLocal(Subject):
    """Debian's host-local, called as the network's only plugin (it reads ``ipam``)."""

    name = plugin_type = "host-local"
    reference = True
    attaches = False
    ifname = "eth0"

    def _data_dir(self) -> Path:
        return self.workdir / "host-local"

    @contextmanager
    def attachment(self, version: str | None = None) -> Iterator[Attachment]:
        version = version or self.highest_version()
        ns = netns.add_netns("l")
        conf = load_case(
            "host-local.conflist", CNI_VERSION=version, DATA_DIR=str(self._data_dir())
        )
        rt = RuntimeConf(netns.unique("c"), self.ifname, netns.netns_path(ns))
        att = Attachment(self, self.runner(), conf, rt, ns)
        try:
            yield att
        finally:
            best_effort_del(att)
            netns.del_netns(ns)

    def assert_released(self, att: Attachment) -> None:
        # host-local keeps one file per leased address naming its container.
        store = self._data_dir() / att.conflist["name"]
        holders = [p.name for p in store.glob("*") if att.rt.container_id in _read(p)]
        assert not holders, (
            f"host-local still leases {holders} to {att.rt.container_id}"
        )


class HostDevice(Subject):
    """Debian's host-device moving a veth out of a private "host" netns."""

    name = plugin_type = "host-device"
    reference = True

    @contextmanager
    def attachment(self, version: str | None = None) -> Iterator[Attachment]:
        version = version or self.highest_version()
        host = netns.add_netns("h")
        pod = netns.add_netns("p")
        device, peer = netns.unique("d"), netns.unique("e")
        att: Attachment | None = None
        try:
            netns.ip(
                "link", "add", device, "type", "veth", "peer", "name", peer, netns=host
            )
            conf = load_case(
                "host-device.conflist",
                CNI_VERSION=version,
                DEVICE=device,
                DATA_DIR=str(self.workdir / "host-device-ipam"),
            )
            rt = RuntimeConf(netns.unique("c"), self.ifname, netns.netns_path(pod))
            runner = self.runner(exec_prefix=netns.exec_prefix(host))
            att = Attachment(
                self, runner, conf, rt, pod, {"host": host, "device": device}
            )
            yield att
        finally:
            if att is not None and netns.netns_exists(pod):
                best_effort_del(att)
            netns.del_netns(pod)
            netns.del_netns(host)  # takes the veth pair with it

    def assert_released(self, att: Attachment) -> None:
        if not netns.netns_exists(att.netns_name):
            return  # the veth died with the netns; nothing can come back
        host_links = netns.links(att.private["host"])
        assert att.private["device"] in host_links, (
            f"{att.private['device']} not back in the host netns: {sorted(host_links)}"
        )


# ------------------------------------------------------------------- helpers


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


# Codes with which the spec has a plugin refuse *before* acting (version, field,
# env, decode, config): an ADD that ended so has nothing to undo.
REFUSED_BEFORE_ACTING = {1, 2, 4, 6, 7}


def _add_may_have_acted(att: Attachment) -> bool:
    for ex in att.runner.history:
        if ex.env.get("CNI_COMMAND") != "ADD":
            continue
        if ex.returncode == 0:
            return True
        try:
            code = json.loads(ex.stdout).get("code")
        except (ValueError, AttributeError):
            return True
        if code not in REFUSED_BEFORE_ACTING:
            return True
    return False


def best_effort_del(att: Attachment) -> None:
    """Teardown: release what a test may have left (errors ignored).

    Skipped when no ADD could have acted: a DEL of our plugins costs an ipamd
    round trip, and most error cases never get that far.
    """
    if not _add_may_have_acted(att):
        return
    try:
        att.runner.del_list(att.conflist, att.rt)
    except Exception:  # noqa: BLE001 - cleanup must not mask the test's own failure
        pass
