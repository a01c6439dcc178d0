# SPDX-License-Identifier: Apache-2.0
"""Pods on the simulated host: a sandbox netns with eth0, then one NIC per rail.

A pod is what a runtime plus multus would make of the reference AI pod: a netns
``rs<id>-<name>`` whose ``eth0`` is a veth to the host (10.244.x.y, the pod's
main default route), then ``net1..netN`` added through ``railyard_sim.runtime`` with
the real plugin binaries, one rail each, with conflists shaped like the ones
Spiderpool's SpiderMultusConfig renders (``deviceID`` injected at top level, as
multus does). Records live in ``<lab>/pods/<name>.json`` so ``show``/``unpod``
run in other processes.

Imports: standard library, ``railyard_sim`` and ``cni.record`` (the records show reads).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cni.record.store import AttachmentRecords
from railyard_sim import agent, daemon, kernel_seams, recording
from railyard_sim.lab import Lab, LabError, RailSpec, ip_json, run_ip
from railyard_sim.runtime import (
    DEBIAN_BIN,
    Attachment,
    PluginError,
    Runtime,
    plugin_bin_dir,
)

POD_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,19}")
PODS = "pods"
ZERO_GUID = "00:00:00:00:00:00:00:00"
ALL_F_GUID = "ff:ff:ff:ff:ff:ff:ff:ff"
VLAN_8021Q = 0x8100
RESULTS = "results"
NODE_NAME = "railyard-sim"
POD_NAMESPACE = "default"
Progress = Callable[[str], None]


@dataclass
class Nic:
    ifname: str
    rail: int
    kind: str
    pci: str
    host_netdev: str  # name in the host before ADD (DEL must restore it)
    rdma: str | None
    conflist: dict[str, Any]
    vf_before: dict[str, Any]  # the PF's VF entry before ADD
    result: dict[str, Any] | None = None
    capability_args: dict[str, Any] = field(default_factory=dict)
    host_mac: str = ""  # the netdev's MAC and MTU before ADD
    host_mtu: int = 0


@dataclass
class Pod:
    name: str
    netns: str
    container_id: str
    eth0_host: str
    eth0_ip: str
    nics: list[Nic] = field(default_factory=list)

    @property
    def netns_path(self) -> str:
        return f"/var/run/netns/{self.netns}"

    def attachment(self, nic: Nic) -> Attachment:
        return Attachment(
            self.container_id,
            self.netns_path,
            nic.ifname,
            args=cni_args(self),
            capability_args=nic.capability_args or None,
        )


def cni_args(pod: Pod) -> dict[str, str]:
    """CNI_ARGS as multus passes them to its delegates."""
    return {
        "IgnoreUnknown": "true",
        "K8S_POD_NAMESPACE": POD_NAMESPACE,
        "K8S_POD_NAME": pod.name,
        "K8S_POD_INFRA_CONTAINER_ID": pod.container_id,
    }


# ------------------------------------------------------------------ records


def _pods_dir(lab: Lab) -> Path:
    return lab.dir / PODS


def save(lab: Lab, pod: Pod) -> None:
    d = _pods_dir(lab)
    d.mkdir(exist_ok=True)
    tmp = d / f".{pod.name}.tmp"
    tmp.write_text(json.dumps(asdict(pod), indent=1) + "\n")
    tmp.replace(d / f"{pod.name}.json")


def load(lab: Lab, name: str) -> Pod:
    try:
        raw = json.loads((_pods_dir(lab) / f"{name}.json").read_text())
    except FileNotFoundError:
        raise LabError(f"no pod {name!r} in lab {lab.dir}") from None
    nics = [Nic(**n) for n in raw.pop("nics")]
    return Pod(**raw, nics=nics)


def names(lab: Lab) -> list[str]:
    d = _pods_dir(lab)
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def forget(lab: Lab, name: str) -> None:
    (_pods_dir(lab) / f"{name}.json").unlink(missing_ok=True)


# ---------------------------------------------------------------- conflists


def conflist(
    rail: RailSpec,
    pci: str,
    ipv6: bool,
    rdma: bool,
    cni_version: str = "0.3.1",
    mtu: int | None = None,
    guid_capability: bool = False,
) -> dict[str, Any]:
    """The rail's network as Spiderpool renders it, with multus's ``deviceID``.

    ``guid_capability`` declares ``infinibandGUID`` on ib-sriov, as a NAD does
    when ib-kubernetes hands out GUIDs.
    """
    ipam: dict[str, Any] = {"type": "spiderpool", "default_ipv4_ippool": [rail.pool_v4]}
    if ipv6:
        ipam["default_ipv6_ippool"] = [rail.pool_v6]
    plugins: list[dict[str, Any]]
    if rail.kind == "ib":
        # SpiderMultusConfig's ibsriov defaults: link_state enable, rdmaIsolation.
        plugins = [
            {
                "type": "ib-sriov",
                "link_state": "enable",
                "rdmaIsolation": rdma,
                "ipam": ipam,
            }
        ]
        if guid_capability:
            plugins[0]["capabilities"] = {"infinibandGUID": True}
    else:
        plugins = [
            {
                "vlan": 0,
                "min_tx_rate": 0,
                "max_tx_rate": 0,
                "type": "sriov",
                "ipam": ipam,
            }
        ]
        if rdma:
            plugins.append({"type": "rdma"})
        if mtu:
            plugins.append({"type": "tuning", "mtu": mtu})
    for p in plugins:
        p["deviceID"] = pci  # multus injects it into every plugin of the list
    return {
        "cniVersion": cni_version,
        "name": f"gpu{rail.number}-{rail.plugin_type}",
        "plugins": plugins,
    }


# ------------------------------------------------------------------ runtime


def runtime(lab: Lab) -> Runtime:
    """Runtime whose plugins are this project's, pointed at the lab and its ipamd."""
    env = {**daemon.client_env(lab.dir), "RAILYARD_NODE_NAME": NODE_NAME}
    if agent.running_pid(lab.dir) is not None:
        # The warm path, as on a node with the agent: shims forward to it.
        bins = [agent.shim_bin_dir(lab.dir / agent.SHIM_BIN_DIR, lab.dir), DEBIAN_BIN]
    else:
        bins = [plugin_bin_dir(lab.dir), DEBIAN_BIN]
    return Runtime(bins, env=env, cache_dir=lab.dir / RESULTS)


# ----------------------------------------------------------------- lifecycle


def create(lab: Lab, name: str) -> Pod:
    """The sandbox: netns, loopback, eth0 with its address and default route."""
    if not POD_NAME.fullmatch(name):
        raise LabError(f"pod name {name!r}: use 1-20 of [a-z0-9-], starting alnum")
    if name in names(lab):
        raise LabError(f"pod {name!r} exists; unpod it first")
    used = {int(load(lab, p).eth0_host.rsplit("e", 1)[1]) for p in names(lab)}
    index = min(set(range(1, 252)) - used, default=0)
    if not index:
        raise LabError("at most 251 pods per lab")
    lab_byte = int(lab.id, 16) % 256
    pod = Pod(
        name=name,
        netns=lab.netns_name(name),
        container_id=f"railyardsim{lab.id}{name}"[:64],
        eth0_host=f"{lab.prefix}e{index}",
        eth0_ip=f"10.244.{lab_byte}.{index + 1}",
    )
    save(lab, pod)
    try:
        run_ip(["netns", "add", pod.netns])
        run_ip(
            [
                "link",
                "add",
                pod.eth0_host,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                pod.netns,
            ]
        )
        run_ip(["link", "set", pod.eth0_host, "up"])
        run_ip(
            [],
            netns=pod.netns,
            batch=(
                "link set lo up\n"
                "link set eth0 up\n"
                f"addr add {pod.eth0_ip}/24 dev eth0\n"
                f"route add default via 10.244.{lab_byte}.1 dev eth0 onlink\n"
            ),
        )
    except BaseException:
        # Nothing attached yet: a half-made sandbox is simply removed.
        run_ip(["link", "del", "dev", pod.eth0_host], check=False)
        run_ip(["netns", "del", pod.netns], check=False)
        forget(lab, pod.name)
        raise
    return pod


def pick_vf(lab: Lab, rail: RailSpec) -> str:
    """The rail's first VF that no pod of this lab holds."""
    taken = {n.pci for p in names(lab) for n in load(lab, p).nics}
    for v in rail.vfs:
        if v.pci not in taken:
            return v.pci
    raise LabError(f"rail {rail.number}: every VF is in use")


def attach(
    lab: Lab,
    pod: Pod,
    nics: int,
    rdma: bool,
    ipv6: bool,
    cni_version: str = "0.3.1",
    mtu: int | None = None,
    say: Progress = lambda _: None,
    ib_guids: bool = False,
) -> None:
    """ADD net1..net<nics>, one per rail; on failure DEL what was added and raise.

    With ``ib_guids`` each IB NIC gets a GUID through
    ``runtimeConfig.infinibandGUID``: ib-sriov sets it on the PF and rebinds
    the VF, whose netdev comes back under a new name.
    """
    if not 1 <= nics <= len(lab.rails):
        raise LabError(f"--nics must be 1..{len(lab.rails)} (one per rail)")
    rt = runtime(lab)
    try:
        for i, rail in enumerate(lab.rails[:nics], start=1):
            pci = pick_vf(lab, rail)
            _, vf = lab.vf(pci)
            host = lab.netdev_of(pci) or vf.netdev
            [before] = ip_json(["link", "show", "dev", host]) or [{}]
            guid = ib_guids and rail.kind == "ib"
            caps = {"infinibandGUID": ib_guid(lab, rail, vf.index)} if guid else {}
            vf_before = kernel_seams.vf_table(lab.dir, rail.pf_netdev, len(rail.vfs))[
                vf.index
            ]
            nic = Nic(
                ifname=f"net{i}",
                rail=rail.number,
                kind=rail.kind,
                pci=pci,
                host_netdev=host,
                rdma=vf.rdma,
                conflist=conflist(rail, pci, ipv6, rdma, cni_version, mtu, guid),
                vf_before=asdict(vf_before),
                capability_args=caps,
                host_mac=str(before.get("address", "")),
                host_mtu=int(str(before.get("mtu", 0))),
            )
            pod.nics.append(nic)
            save(lab, pod)
            plugins = ", ".join(p["type"] for p in nic.conflist["plugins"])
            say(
                f"ADD {nic.ifname}: rail {rail.number} ({rail.kind}) VF {pci} "
                f"{host} [{plugins}]"
            )
            started = time.monotonic()
            try:
                nic.result = rt.add(nic.conflist, pod.attachment(nic))
            except (PluginError, OSError) as exc:
                say(f"ADD {nic.ifname} failed: {exc}")
                if isinstance(exc, PluginError) and exc.stderr.strip():
                    say(exc.stderr.strip().splitlines()[-1])
                raise
            save(lab, pod)
            say(f"ADD {nic.ifname} done in {time.monotonic() - started:.2f}s")
    except BaseException:
        # Whatever failed (a plugin, a lookup, an interrupt), the NICs added so
        # far are DELeted; the pod's record stays only if that DEL has problems.
        for problem in detach(lab, pod, say):
            say(f"rollback: {problem}")
        raise


def ib_guid(lab: Lab, rail: RailSpec, vf_index: int) -> str:
    """A GUID unique per lab, rail and VF, as ib-kubernetes would hand out."""
    lab_bytes = bytes.fromhex(lab.id.rjust(4, "0")[-4:])
    raw = bytes([0x02, 0x00]) + lab_bytes + bytes([rail.number, vf_index, 0, 1])
    return ":".join(f"{b:02x}" for b in raw)


def detach(lab: Lab, pod: Pod, say: Progress = lambda _: None) -> list[str]:
    """DEL every NIC in reverse (as kubelet tears a pod down); the problems found.

    Then checks what an operator would: each VF back in the host under its
    name, with its PF-side settings, its RDMA device back in the host netns.
    """
    rt = runtime(lab)
    problems: list[str] = []
    for nic in reversed(list(pod.nics)):
        say(f"DEL {nic.ifname}: VF {nic.pci}")
        started = time.monotonic()
        try:
            rt.delete(nic.conflist, pod.attachment(nic), prev_result=nic.result)
        except (PluginError, OSError) as exc:
            problems.append(f"DEL {nic.ifname}: {exc}")
            continue
        say(f"DEL {nic.ifname} done in {time.monotonic() - started:.2f}s")
        problems += _verify_restored(lab, nic)
        pod.nics.remove(nic)
        save(lab, pod)
    if problems:
        return problems
    run_ip(["link", "del", "dev", pod.eth0_host], check=False)
    run_ip(["netns", "del", pod.netns], check=False)
    forget(lab, pod.name)
    return problems


def _verify_restored(lab: Lab, nic: Nic) -> list[str]:
    problems = []
    rail, vf = lab.vf(nic.pci)
    now = lab.netdev_of(nic.pci)
    if now != nic.host_netdev:
        problems.append(f"{nic.pci}: host netdev is {now}, was {nic.host_netdev}")
    else:
        [link] = ip_json(["link", "show", "dev", now]) or [{}]
        if not link:
            problems.append(f"{nic.pci}: {now} is not in the host netns")
        elif nic.host_mac and (link["address"], link["mtu"]) != (
            # An IPoIB address is the kernel's (QPN + GID): a rebind changes it.
            nic.host_mac if rail.kind != "ib" else link["address"],
            nic.host_mtu,
        ):
            problems.append(
                f"{nic.pci}: {now} has MAC {link['address']} MTU {link['mtu']}, "
                f"was {nic.host_mac} MTU {nic.host_mtu}"
            )
    after = asdict(
        kernel_seams.vf_table(lab.dir, rail.pf_netdev, len(rail.vfs))[vf.index]
    )
    before = dict(nic.vf_before)
    if before.get("vlan_proto") == 0 and after.get("vlan_proto") == VLAN_8021Q:
        # A driver that reports no VLAN protocol (netdevsim's fresh VF) is
        # restored with 802.1Q, what 0 means to it.
        after["vlan_proto"] = 0
    for key in ("node_guid", "port_guid"):
        # ib-sriov restores an all-zero GUID as all-F (ib-sriov-cni does too).
        if before.get(key) == ZERO_GUID and after.get(key) == ALL_F_GUID:
            after[key] = ZERO_GUID
    if after != before:
        diff = {k: (before.get(k), v) for k, v in after.items() if before.get(k) != v}
        problems.append(f"{nic.pci}: VF settings not restored {diff}")
    if nic.rdma and kernel_seams.rdma_location(lab.dir, nic.rdma) is not None:
        problems.append(f"{nic.pci}: RDMA device {nic.rdma} is not back in the host")
    return problems


# --------------------------------------------------------------------- show


def show(lab: Lab, pod: Pod) -> tuple[str, bool]:
    """What an operator checks, as text; False when a NIC cannot reach its gateway."""
    out: list[str] = []

    def section(args: list[str]) -> None:
        proc = run_ip(args, netns=pod.netns, check=False)
        out.append(f"# ip {' '.join(args)}   (pod {pod.name})")
        out.append((proc.stdout or proc.stderr).rstrip())
        out.append("")

    section(["addr"])
    section(["-4", "rule"])
    section(["-6", "rule"])
    section(["route", "show", "table", "main"])
    tables = sorted(
        {
            int(str(r["table"]))
            for fam in ("-4", "-6")
            for r in ip_json([fam, "rule"], netns=pod.netns)
            if str(r.get("table", "")).isdigit()
        }
    )
    for table in tables:
        section(["route", "show", "table", str(table)])
        section(["-6", "route", "show", "table", str(table)])

    ok = True
    out.append("# ping from each NIC's address to its rail gateway")
    for nic in pod.nics:
        rail = lab.rail(nic.rail)
        for ip, gw in _nic_ips(nic, rail):
            good = _ping(pod.netns, ip, gw)
            ok = ok and good
            out.append(
                f"{nic.ifname}  {ip:<22} -> {gw:<16} {'ok' if good else 'FAILED'}"
            )
    out.append("")
    out.append("# RDMA devices")
    for nic in pod.nics:
        found = recording.rdma_of(lab.dir, nic.pci) if nic.rdma else None
        if found is None:
            continue
        name, where = found
        if kernel_seams.enabled(lab.dir).get("rdma"):
            where = kernel_seams.rdma_location(lab.dir, name)
        place = (
            f"pod netns {pod.netns}"
            if where == pod.netns_path
            else "host netns"
            if where is None
            else where
        )
        out.append(f"{nic.ifname}  VF {nic.pci}  {name:<9} in {place}")
    out.append("")
    out.append("# where each VF sits (from its attachment record)")
    records = AttachmentRecords(lab.state_dir)
    for nic in pod.nics:
        st = records.any_vf(pod.container_id, nic.ifname)
        if st is None:
            continue
        numa = "-" if st.numa_node is None else str(st.numa_node)
        out.append(
            f"{nic.ifname}  VF {nic.pci}  PCIe root {st.pcie_root or '-'}  "
            f"NUMA node {numa}"
        )
    return "\n".join(out) + "\n", ok


def _nic_ips(nic: Nic, rail: RailSpec) -> list[tuple[str, str]]:
    pairs = []
    for ip in (nic.result or {}).get("ips", []):
        addr = str(ip["address"]).split("/")[0]
        gw = ip.get("gateway") or (rail.gateway_v6 if ":" in addr else rail.gateway_v4)
        pairs.append((addr, gw))
    return pairs


def _ping(netns: str, src: str, dst: str, tries: int = 3) -> bool:
    ping = shutil.which("ping")
    cmd = [ping] if ping else ["busybox", "ping"]
    if ":" in dst:
        cmd.append("-6")
    # An IPv6 source may still be tentative (DAD) right after ADD; the bind
    # then fails at once, so a few tries cost little.
    for attempt in range(tries):
        proc = subprocess.run(
            ["ip", "netns", "exec", netns, *cmd, "-c", "1", "-W", "2", "-I", src, dst],
            capture_output=True,
            check=False,
        )
        if proc.returncode == 0:
            return True
        if attempt + 1 < tries:
            time.sleep(0.5)
    return False
