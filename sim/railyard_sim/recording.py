# SPDX-License-Identifier: Apache-2.0
"""The recording seam: PF-side VF settings, IB GUIDs, rebinds and RDMA netlink.

This kernel has no SR-IOV and no RDMA, so on the simulated host the lab's
dependency factory (``railyard_sim.host``) injects these two classes in place
of ``NetlinkVfOps`` and ``NetlinkRdmaOps``. Plugins are separate processes, so
everything lives in files of the lab directory, changed under an flock:

- ``recording.json``: the PFs' VF tables (what ``ip link show <pf>`` would list),
  the RDMA devices' netns, the RDMA netns mode, the VF stand-ins' bridge ports;
- ``journal.log``: one JSON line per call (op, args, error) - read it with
  ``Journal(lab).entries()``;
- ``faults.json``: failure injection, ``{"set_trust": "EOPNOTSUPP"}`` or
  ``{"set_trust": {"error": "EBUSY", "count": 1, "match": {"vf": 1}}}``; a
  matching call raises the contract's exception (``NotSupported`` ...). Write it
  with ``Faults(lab).inject(...)``.

What the emulation keeps from the real kernel: VLAN/MAC/rate/spoofchk/trust are
refused on IPoIB PFs (ipoib implements only link state and GUIDs), GUIDs are
refused on Ethernet PFs (mlx5e has no ndo_set_vf_guid), ``rebind`` destroys the
VF netdev and creates one under a new name (real uevents), and an RDMA device
whose netns is gone is back in the host netns.

Imports: standard library and ``cni.kernel`` records/exceptions only.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cni.kernel import (
    DeviceBusy,
    DeviceNotFound,
    InvalidArgument,
    KernelError,
    LinkExists,
    LinkNotFound,
    NetnsNotFound,
    NetnsPath,
    NotSupported,
    RdmaOps,
    Timeout,
    VfInfo,
    VfOps,
)
from railyard_sim.lab import (
    PREFIX,
    SYS_DIR,
    LabError,
    Manifest,
    netns_identity,
    run_ip,
    veth_peer_name,
)
from railyard_sim.pci_tree import PciTree

STATE = "recording.json"
LOCK = "recording.lock"
JOURNAL = "journal.log"
FAULTS = "faults.json"
NETNS_MODES = ("exclusive", "shared", "unsupported")

_MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")
_GUID = re.compile(r"^([0-9a-f]{2}:){7}[0-9a-f]{2}$")

_ERRORS: dict[str, type[KernelError]] = {
    "EOPNOTSUPP": NotSupported,
    "ENOTSUP": NotSupported,
    "EBUSY": DeviceBusy,
    "EINVAL": InvalidArgument,
    "ERANGE": InvalidArgument,
    "ENODEV": DeviceNotFound,
    "ENOENT": DeviceNotFound,
    "ETIMEDOUT": Timeout,
    "EEXIST": LinkExists,
}
_CLASSES: dict[str, type[KernelError]] = {
    c.__name__: c
    for c in (
        KernelError,
        NotSupported,
        DeviceBusy,
        InvalidArgument,
        DeviceNotFound,
        Timeout,
        LinkExists,
        LinkNotFound,
        NetnsNotFound,
    )
}


# ------------------------------------------------------------- state files


def init_state(lab_dir: Path, manifest: Manifest) -> None:
    """Write the lab's initial recording state (called by ``Lab.up``)."""
    pfs: dict[str, Any] = {}
    rdma: dict[str, Any] = {}
    ports: dict[str, Any] = {}
    lab_bytes = bytes.fromhex(manifest.lab_id.rjust(4, "0")[-4:])
    for r in manifest.rails:
        vfs = {}
        for v in r.vfs:
            guid = None
            if r.kind == "ib":
                # Unique per lab, rail and VF; never zero or all-F, like a
                # firmware-assigned VF GUID.
                raw = bytes([0x02, 0xC9]) + lab_bytes + bytes([r.number, 0, 0, v.index])
                guid = ":".join(f"{b:02x}" for b in raw)
            vfs[str(v.index)] = asdict(
                VfInfo(
                    vf=v.index,
                    spoofchk=True,
                    trust=False,
                    node_guid=guid,
                    port_guid=guid,
                )
            )
            rdma[v.rdma] = {"pci": v.pci, "netns": None}
            ports[v.pci] = {
                "fabric_netns": r.fabric_netns,
                "peer": v.peer,
                "bridge": r.bridge,
                "mtu": r.pf_mtu,
            }
        pfs[r.pf_netdev] = {"pci": r.pf_pci, "kind": r.kind, "vfs": vfs}
        rdma[r.pf_rdma] = {"pci": r.pf_pci, "netns": None}
    state = {
        "version": 1,
        "lab_id": manifest.lab_id,
        "netns_mode": "exclusive",
        "host_netns": list(manifest.host_netns),
        "pfs": pfs,
        "rdma": rdma,
        "ports": ports,
        "next_rebind": 0,
    }
    with _locked(lab_dir) as st:
        st.clear()
        st.update(state)
    (lab_dir / JOURNAL).touch()


def remove_state(lab_dir: Path) -> None:
    for name in (STATE, LOCK, JOURNAL, FAULTS):
        (lab_dir / name).unlink(missing_ok=True)


@contextmanager
def _locked(lab_dir: Path | str) -> Iterator[dict[str, Any]]:
    """The state dict under the lab's flock; written back atomically on exit.

    Every simulated VF/RDMA operation of a plugin passes here, so it is on the
    benchmarked ADD's path where a real node has one netlink request: the file
    is compact JSON (C-encoded; ``indent`` would take json's pure-Python
    encoder, ~2 ms per write of an 8x8 lab's ~30 KB) and is written only when
    the operation changed it (its text then differs from the one read).
    """
    lab_dir = Path(lab_dir)
    fd = os.open(lab_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        path = lab_dir / STATE
        try:
            before = path.read_text()
        except FileNotFoundError:
            before = "{}\n"
        state: dict[str, Any] = json.loads(before)
        yield state
        after = json.dumps(state, sort_keys=True) + "\n"
        if after != before:
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(after)
            os.replace(tmp, path)
    finally:
        os.close(fd)


def read_state(lab_dir: Path | str) -> dict[str, Any]:
    """A snapshot of ``recording.json`` (for tests and ``railyard-sim show``)."""
    with _locked(lab_dir) as st:
        snapshot: dict[str, Any] = json.loads(json.dumps(st))
        return snapshot


# ----------------------------------------------------------------- journal


@dataclass(frozen=True, slots=True)
class JournalEntry:
    op: str
    args: dict[str, Any]
    error: str | None  # the injected or emulated error's class name
    pid: int
    ts: float


class Journal:
    """Reader of ``<lab>/journal.log``: every recorded call, oldest first."""

    def __init__(self, lab_dir: Path | str) -> None:
        self.path = Path(lab_dir) / JOURNAL

    def entries(self, *ops: str) -> list[JournalEntry]:
        """All entries, or only those whose op is one of ``ops``."""
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = [JournalEntry(**json.loads(line)) for line in lines if line.strip()]
        return [e for e in out if not ops or e.op in ops]

    def ops(self) -> list[str]:
        return [e.op for e in self.entries()]

    def clear(self) -> None:
        self.path.write_text("")


def _journal(
    lab_dir: Path, op: str, args: Mapping[str, Any], error: str | None
) -> None:
    line = json.dumps(
        {
            "op": op,
            "args": dict(args),
            "error": error,
            "pid": os.getpid(),
            "ts": round(time.time(), 6),
        }
    )
    # One write() on an O_APPEND fd: lines from concurrent plugins never mix.
    fd = os.open(lab_dir / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


# ------------------------------------------------------------------ faults


class Faults:
    """Failure injection through ``<lab>/faults.json``, read by every call."""

    def __init__(self, lab_dir: Path | str) -> None:
        self.dir = Path(lab_dir)
        self.path = self.dir / FAULTS

    def inject(
        self,
        op: str,
        error: str = "EOPNOTSUPP",
        count: int | None = None,
        match: Mapping[str, Any] | None = None,
    ) -> None:
        """Make ``op`` fail with ``error`` (errno name or exception class name).

        ``count`` limits how many calls fail (None = all); ``match`` restricts
        the fault to calls whose arguments have these values (``{"vf": 1}``).
        """
        if error not in _ERRORS and error not in _CLASSES and not hasattr(errno, error):
            raise ValueError(f"unknown error {error!r}")
        with _locked(self.dir):
            faults = self._read()
            faults[op] = {"error": error, "count": count, "match": dict(match or {})}
            self._write(faults)

    def clear(self, op: str | None = None) -> None:
        with _locked(self.dir):
            faults = self._read()
            if op is None:
                faults.clear()
            else:
                faults.pop(op, None)
            self._write(faults)

    def pending(self) -> dict[str, Any]:
        with _locked(self.dir):
            return self._read()

    def take(self, op: str, args: Mapping[str, Any]) -> KernelError | None:
        """The exception to raise for this call, consuming one count. Locked."""
        faults = self._read()
        spec = faults.get(op)
        if spec is None:
            return None
        if isinstance(spec, str):
            spec = {"error": spec, "count": None, "match": {}}
        for key, want in (spec.get("match") or {}).items():
            if args.get(key) != want:
                return None
        count = spec.get("count")
        if count is not None:
            if count <= 1:
                faults.pop(op)
            else:
                faults[op] = {**spec, "count": count - 1}
            self._write(faults)
        return _exception(op, str(spec["error"]))

    def _read(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.path.read_text() or "{}"))
        except FileNotFoundError:
            return {}

    def _write(self, faults: Mapping[str, Any]) -> None:
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(faults, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


def _exception(op: str, name: str) -> KernelError:
    msg = f"{op}: injected {name} (simulated host fault)"
    if name in _CLASSES:
        return _CLASSES[name](msg)
    code = getattr(errno, name, None)
    return _ERRORS.get(name, KernelError)(msg, errno=code)


# -------------------------------------------------------------- base class


class _Recorder:
    def __init__(self, lab_dir: Path | str) -> None:
        self.lab = Path(lab_dir)
        self._faults = Faults(self.lab)

    @contextmanager
    def _call(self, op: str, **args: Any) -> Iterator[dict[str, Any]]:
        """Lock, apply an injected fault, journal the call and its outcome."""
        with _locked(self.lab) as state:
            fault = self._faults.take(op, args)
            if fault is not None:
                _journal(self.lab, op, args, type(fault).__name__)
                raise fault
            try:
                yield state
            except KernelError as exc:
                _journal(self.lab, op, args, type(exc).__name__)
                raise
            _journal(self.lab, op, args, None)


# ------------------------------------------------------------------- VfOps


class RecordingVfOps(_Recorder):
    """``VfOps`` on the simulated host: a VF table per PF in ``recording.json``."""

    def get_vf(self, pf: str, vf: int) -> VfInfo:
        with self._call("get_vf", pf=pf, vf=vf) as st:
            # Reading a VF the table lacks is the adapter's DeviceNotFound
            # (the kernel lists the table; a setter's index is the driver's EINVAL).
            table = st.get("pfs", {}).get(pf)
            if table is not None and str(vf) not in table["vfs"]:
                raise DeviceNotFound(f"PF {pf} has no VF {vf}")
            return VfInfo(**_vf(st, pf, vf))

    def set_vlan(self, pf: str, vf: int, vlan: int, qos: int, proto: int) -> None:
        with self._call(
            "set_vlan", pf=pf, vf=vf, vlan=vlan, qos=qos, proto=proto
        ) as st:
            entry = _vf(st, pf, vf, ethernet_only="vlan")
            # As rtnetlink checks (tests/realkernel pins it on a real VF
            # table): the id below VLAN_N_VID, the priority at most 7; the
            # protocol is passed to the driver as it comes.
            if not 0 <= vlan <= 4095 or not 0 <= qos <= 7:
                raise InvalidArgument(
                    f"vlan {vlan} qos {qos} out of range", errno.EINVAL
                )
            entry.update(vlan=vlan, qos=qos, vlan_proto=proto)

    def set_mac(self, pf: str, vf: int, mac: str) -> None:
        with self._call("set_mac", pf=pf, vf=vf, mac=mac) as st:
            entry = _vf(st, pf, vf, ethernet_only="mac")
            if not _MAC.match(mac.lower()):
                raise InvalidArgument(f"bad MAC {mac!r}", errno.EINVAL)
            if int(mac[:2], 16) & 1:  # the drivers' is_multicast_ether_addr()
                raise InvalidArgument(f"multicast MAC {mac}", errno.EINVAL)
            entry["mac"] = mac.lower()

    def set_rate(self, pf: str, vf: int, min_tx: int, max_tx: int) -> None:
        with self._call("set_rate", pf=pf, vf=vf, min_tx=min_tx, max_tx=max_tx) as st:
            entry = _vf(st, pf, vf, ethernet_only="rate")
            # mlx5 refuses a guaranteed rate above a non-zero ceiling.
            if min_tx < 0 or max_tx < 0 or (max_tx and min_tx > max_tx):
                raise InvalidArgument(
                    f"min_tx_rate {min_tx} > max_tx_rate {max_tx}", errno.EINVAL
                )
            entry.update(min_tx_rate=min_tx, max_tx_rate=max_tx)

    def set_spoofchk(self, pf: str, vf: int, on: bool) -> None:
        with self._call("set_spoofchk", pf=pf, vf=vf, on=on) as st:
            _vf(st, pf, vf, ethernet_only="spoofchk")["spoofchk"] = bool(on)

    def set_trust(self, pf: str, vf: int, on: bool) -> None:
        with self._call("set_trust", pf=pf, vf=vf, on=on) as st:
            _vf(st, pf, vf, ethernet_only="trust")["trust"] = bool(on)

    def set_link_state(self, pf: str, vf: int, state: int) -> None:
        with self._call("set_link_state", pf=pf, vf=vf, state=state) as st:
            entry = _vf(st, pf, vf)
            if state not in (0, 1, 2):
                raise InvalidArgument(f"link state {state}", errno.EINVAL)
            entry["link_state"] = state

    def set_node_guid(self, pf: str, vf: int, guid: str) -> None:
        with self._call("set_node_guid", pf=pf, vf=vf, guid=guid) as st:
            _vf(st, pf, vf, ib_only="node GUID")["node_guid"] = _guid(guid)

    def set_port_guid(self, pf: str, vf: int, guid: str) -> None:
        with self._call("set_port_guid", pf=pf, vf=vf, guid=guid) as st:
            _vf(st, pf, vf, ib_only="port GUID")["port_guid"] = _guid(guid)

    def rebind(self, pci: str) -> None:
        """Unbind/bind emulation: the VF's netdev is destroyed and recreated.

        The new veth gets a new lab-unique name (``rs<id>ib<n>``), as IPoIB
        netdevs often do after a rebind, and its peer joins the rail's bridge.
        The fake tree names the new netdev *before* the link exists, so a waiter
        re-reading sysfs on each uevent sees the new name. The VF's RDMA device
        is recreated in the host netns, as a real driver bind does.
        """
        with self._call("rebind", pci=pci) as st:
            port = st.get("ports", {}).get(pci)
            if port is None:
                raise DeviceNotFound(f"no VF {pci} on the simulated host", errno.ENODEV)
            n = int(st.get("next_rebind", 0))
            st["next_rebind"] = n + 1
            new_name = f"{PREFIX}{st['lab_id']}ib{n}"
            new_peer = f"ib{n}"
            tree = PciTree(self.lab / SYS_DIR)
            run_ip(
                ["link", "del", "dev", port["peer"]],
                netns=port["fabric_netns"],
                check=False,
            )
            tree.remove_netdev(pci)
            tree.set_netdev(pci, new_name)
            try:
                run_ip(
                    [
                        "link",
                        "add",
                        new_name,
                        "type",
                        "veth",
                        "peer",
                        "name",
                        new_peer,
                        "mtu",
                        str(port["mtu"]),
                        "netns",
                        port["fabric_netns"],
                    ]
                )
                run_ip(
                    ["link", "set", new_peer, "master", port["bridge"], "up"],
                    netns=port["fabric_netns"],
                )
            except LabError as exc:
                raise KernelError(f"rebind {pci}: {exc}") from exc
            port["peer"] = new_peer
            for dev in st.get("rdma", {}).values():
                if dev["pci"] == pci:
                    dev["netns"] = None


def _vf(
    st: Mapping[str, Any], pf: str, vf: int, ethernet_only: str = "", ib_only: str = ""
) -> dict[str, Any]:
    table = st.get("pfs", {}).get(pf)
    if table is None:
        raise LinkNotFound(f"{pf}: no such PF on the simulated host", errno.ENODEV)
    if ethernet_only and table["kind"] == "ib":
        raise NotSupported(
            f"{pf}: IPoIB PF cannot set VF {ethernet_only}", errno.EOPNOTSUPP
        )
    if ib_only and table["kind"] != "ib":
        raise NotSupported(
            f"{pf}: Ethernet PF cannot set VF {ib_only}", errno.EOPNOTSUPP
        )
    entry = table["vfs"].get(str(vf))
    if entry is None:
        raise InvalidArgument(f"{pf}: no VF {vf}", errno.EINVAL)
    return entry  # type: ignore[no-any-return]


def _guid(guid: str) -> str:
    if not _GUID.match(guid.lower()):
        raise InvalidArgument(f"bad GUID {guid!r}", errno.EINVAL)
    return guid.lower()


# ----------------------------------------------------------------- RdmaOps


class RecordingRdmaOps(_Recorder):
    """``RdmaOps`` on the simulated host: each RDMA device's netns is recorded.

    A netns is compared by (st_dev, st_ino) of its path; ``None`` is the
    caller's own netns. A recorded netns that no longer exists means the device
    is back in the host netns, which is what the kernel does when a netns dies.
    """

    def netns_mode(self) -> str:
        with self._call("netns_mode") as st:
            return _mode(st)

    def devices(self, netns: NetnsPath = None) -> list[str]:
        with self._call("devices", netns=netns) as st:
            mode = _mode(st)
            where = _identity(netns)
            return sorted(
                name
                for name, dev in st.get("rdma", {}).items()
                if mode == "shared" or _location(st, dev) == where
            )

    def move(self, dev: str, to_netns: NetnsPath, netns: NetnsPath = None) -> None:
        with self._call("move", dev=dev, to_netns=to_netns, netns=netns) as st:
            if _mode(st) != "exclusive":
                raise NotSupported(
                    "RDMA devices move only in exclusive netns mode", errno.EOPNOTSUPP
                )
            entry = st.get("rdma", {}).get(dev)
            # In exclusive mode a device outside the caller's netns is invisible.
            if entry is None or _location(st, entry) != _identity(netns):
                raise DeviceNotFound(f"RDMA device {dev} not found", errno.ENODEV)
            target = _identity(to_netns)
            if target == tuple(st["host_netns"]):
                entry["netns"] = None
            else:
                path = to_netns or f"/proc/{os.getpid()}/ns/net"
                entry["netns"] = {"path": path, "dev": target[0], "ino": target[1]}

    def rename(self, dev: str, new_name: str, netns: NetnsPath = None) -> None:
        """RDMA_NLDEV_CMD_SET with a name: unique per host, as on every
        released kernel (``ib_device_rename`` looks at all devices, whatever
        their netns), so a name held in another pod is EEXIST too. The fake
        tree's ``infiniband/<name>`` directory follows (files and all)."""
        with self._call("rename", dev=dev, new_name=new_name, netns=netns) as st:
            devices = st.get("rdma", {})
            entry = devices.get(dev)
            if entry is None or _location(st, entry) != _identity(netns):
                raise DeviceNotFound(f"RDMA device {dev} not found", errno.ENODEV)
            if new_name == dev:
                return
            if not new_name or len(new_name.encode()) > 63 or "/" in new_name:
                raise InvalidArgument(
                    f"bad RDMA device name {new_name!r}", errno.EINVAL
                )
            if new_name in devices:
                raise LinkExists(f"RDMA device name {new_name} is taken", errno.EEXIST)
            devices[new_name] = devices.pop(dev)
            ib = self.lab / SYS_DIR / "bus" / "pci" / "devices" / entry["pci"]
            ib = ib / "infiniband"
            if (ib / dev).is_dir():
                os.rename(ib / dev, ib / new_name)


def _mode(st: Mapping[str, Any]) -> str:
    mode = str(st.get("netns_mode", "exclusive"))
    if mode == "unsupported":
        raise NotSupported(
            "no RDMA subsystem on this (simulated) host", errno.EOPNOTSUPP
        )
    return mode


def _identity(netns: NetnsPath) -> tuple[int, int]:
    try:
        return netns_identity(netns)
    except OSError as exc:
        raise NetnsNotFound(f"{netns}: {exc.strerror}", exc.errno) from None


def _location(st: Mapping[str, Any], dev: Mapping[str, Any]) -> tuple[int, int]:
    host = (int(st["host_netns"][0]), int(st["host_netns"][1]))
    loc = dev.get("netns")
    if not loc:
        return host
    try:
        now = netns_identity(loc["path"])
    except OSError:
        return host
    return now if now == (loc["dev"], loc["ino"]) else host


# ------------------------------------------------------- helpers for tests


def set_netns_mode(lab_dir: Path | str, mode: str) -> None:
    """Switch the simulated RDMA netns mode ("exclusive", "shared", "unsupported")."""
    if mode not in NETNS_MODES:
        raise ValueError(f"netns mode must be one of {NETNS_MODES}")
    with _locked(lab_dir) as st:
        st["netns_mode"] = mode


def rdma_location(lab_dir: Path | str, dev: str) -> str | None:
    """The netns path an RDMA device is recorded in; None = the host netns."""
    with _locked(lab_dir) as st:
        entry = st["rdma"][dev]
        host = (int(st["host_netns"][0]), int(st["host_netns"][1]))
        if _location(st, entry) == host:
            return None
        return str(entry["netns"]["path"])


def rdma_of(lab_dir: Path | str, pci: str) -> tuple[str, str | None] | None:
    """(current name, netns path or None for the host) of the RDMA device of
    function ``pci``, whatever it was renamed to; None when it has none."""
    with _locked(lab_dir) as st:
        host = (int(st["host_netns"][0]), int(st["host_netns"][1]))
        for name, entry in st.get("rdma", {}).items():
            if entry["pci"] == pci:
                if _location(st, entry) == host:
                    return str(name), None
                return str(name), str(entry["netns"]["path"])
    return None


def vf_table(lab_dir: Path | str, pf: str) -> dict[int, VfInfo]:
    """The PF's VF table as ``ip link show <pf>`` would list it."""
    with _locked(lab_dir) as st:
        vfs = st["pfs"][pf]["vfs"]
        return {int(k): VfInfo(**v) for k, v in vfs.items()}


def renumber_rdma(lab_dir: Path | str, pci: str, new_name: str) -> str:
    """Give the RDMA device of function ``pci`` the name ``new_name``; the old name.

    What a driver rebind may do on real hardware (``mlx5_4`` comes back as
    ``mlx5_104``): the device keeps its recorded netns, the fake tree's
    ``infiniband/`` entry follows. Not journaled: it is the kernel's doing, not
    a call through the seam.
    """
    if not new_name or "/" in new_name or len(new_name) > 63:
        raise ValueError(f"bad RDMA device name {new_name!r}")
    with _locked(lab_dir) as st:
        devices = st.get("rdma", {})
        old: str | None = next(
            (str(n) for n, d in devices.items() if d["pci"] == pci), None
        )
        if old is None:
            raise DeviceNotFound(f"no RDMA device of {pci} on the simulated host")
        if new_name != old:
            if new_name in devices:
                raise ValueError(f"RDMA device name {new_name} is taken")
            devices[new_name] = devices.pop(old)
            # Under the lock, so a reader never sees the state and tree differ.
            tree = PciTree(Path(lab_dir) / SYS_DIR)
            tree.remove_rdma(pci, old)
            tree.rdma(pci, new_name)
    return old


def host_netdev(lab_dir: Path | str, pci: str) -> str | None:
    """The VF's netdev in the host netns, found as sysfs would: by the device.

    The stand-in is the veth whose other end is the VF's bridge port in the
    fabric netns (``ports`` in the state; a rebind replaces it). When found, the
    fake tree's ``net/`` entry is re-synced to its current name: real sysfs
    follows renames, plain files do not. None when the stand-in is not in the
    host netns (in a pod) or does not exist (unbound).
    """
    with _locked(lab_dir) as st:
        # Under the lock: a concurrent rebind cannot swap the port meanwhile.
        port = st.get("ports", {}).get(pci)
        if port is None:
            return None
        name = veth_peer_name(port["fabric_netns"], port["peer"])
        if name is not None:
            tree = PciTree(Path(lab_dir) / SYS_DIR)
            if tree.netdevs(pci) != [name]:
                tree.set_netdev(pci, name)
        return name


def _conforms(vf: RecordingVfOps, rdma: RecordingRdmaOps) -> tuple[VfOps, RdmaOps]:
    """Conformance with the kernel seam, checked by mypy (Go's `var _ X = &Y{}`)."""
    return vf, rdma
