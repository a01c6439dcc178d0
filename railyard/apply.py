# SPDX-License-Identifier: Apache-2.0
"""``railyard apply``: the whole file is valid and applied, or nothing changes.

``plan`` reads everything and changes nothing: every network parsed and
validated (all errors collected, not just the first), names unique, every
pool a network names present in the file or already in ipamd, the pools
checked by ipamd itself (ApplyPools dry run), and the conf dir checked for
conflists railyard did not write. Only a clean plan is ``execute``d: pools
first (if ipamd refuses them, no network is written), then the conflists
(atomically, all or none), then the NAD files.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ipamd.manifest import parse_manifest
from ipamd.pools import PoolError
from railyard import documents, render, validate
from railyard.confdir import Change, ConfDir, ConfDirError, NetworkRecord
from railyard.documents import Document, Documents
from railyard.ipamd_link import ApplyReport, IpamdError, IpamdPools
from railyard.network import MultusConfig, NetworkError, parse


class ApplyError(RuntimeError):
    """The file cannot be applied; ``errors`` holds every reason."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = list(errors)


@dataclass(frozen=True, slots=True)
class Options:
    conf_dir: Path | None  # None: no conflists (Kubernetes output only)
    nad_out: Path | None = None
    dry_run: bool = False
    # resource name -> VF PCI address, for runtimes without a device plugin
    device_ids: Mapping[str, str] = field(default_factory=dict)
    sysfs_root: Path = Path("/sys")


@dataclass(frozen=True, slots=True)
class Rendered:
    network: MultusConfig
    conflist: dict[str, Any]
    nad: dict[str, Any]

    @property
    def record(self) -> NetworkRecord:
        net = self.network
        return NetworkRecord(
            name=net.conflist_name,
            source=net.key,
            cni_type=net.cni_type,
            resource_name=net.resource_name,
            pools=net.ippools.names,
            file="",
        )


@dataclass(slots=True)
class Plan:
    pool_docs: list[Document]
    networks: list[Rendered]
    skipped: list[str]
    warnings: list[str]
    pool_report: ApplyReport | None = None
    conf_changes: list[Change] = field(default_factory=list)

    @property
    def pools_manifest(self) -> str:
        return documents.pools_manifest(self.pool_docs)


def plan(docs: Documents, ipamd: IpamdPools | None, options: Options) -> Plan:
    """Validate everything and say what would change; raises ApplyError."""
    errors: list[str] = []
    warnings: list[str] = []
    skipped = [_skip_reason(d) for d in docs.skipped]

    file_pools = _file_pools(docs.pools, errors)
    networks = _networks(docs.networks, options, errors, warnings)
    errors += _duplicates(networks, options)

    known = set(file_pools)
    if networks or docs.pools:
        if ipamd is None:
            warnings.append(
                "ipamd not asked (--no-ipamd): pools are checked against this file only"
            )
        else:
            try:
                known |= ipamd.pool_names()
            except IpamdError as exc:
                raise ApplyError([*errors, str(exc)]) from None
    for rendered in networks:
        net = rendered.network
        for pool in net.ippools.names:
            if not any(fnmatch.fnmatchcase(k, pool) for k in known):
                close = difflib.get_close_matches(pool, sorted(known), n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                errors.append(
                    f"{net.where}: SpiderMultusConfig {net.key}: pool {pool} does "
                    f"not exist (neither in this file nor in ipamd){hint}"
                )
    if errors:
        raise ApplyError(errors)

    result = Plan(list(docs.pools), networks, skipped, warnings)
    if docs.pools and ipamd is not None:
        try:
            result.pool_report = ipamd.apply(result.pools_manifest, dry_run=True)
        except IpamdError as exc:
            raise ApplyError([str(exc)]) from None
    elif docs.pools:
        result.warnings.append(
            "pools not sent to ipamd (--no-ipamd): "
            + ", ".join(f"{d.kind}/{d.name}" for d in docs.pools)
        )
    if options.conf_dir is not None:
        wanted = [(r.record, _with_device(r, options.device_ids)) for r in networks]
        try:
            result.conf_changes = ConfDir(options.conf_dir).plan(wanted)
        except ConfDirError as exc:
            raise ApplyError([str(exc)]) from None
    return result


def execute(
    result: Plan, ipamd: IpamdPools | None, options: Options
) -> ApplyReport | None:
    """Apply a clean plan: pools, then conflists, then NAD files."""
    report = None
    if result.pool_docs and ipamd is not None:
        try:
            report = ipamd.apply(result.pools_manifest, dry_run=False)
        except IpamdError as exc:
            raise ApplyError([f"{exc}; no network was written"]) from None
    if options.conf_dir is not None:
        try:
            ConfDir(options.conf_dir).write(result.conf_changes)
        except ConfDirError as exc:
            raise ApplyError([str(exc)]) from None
    if options.nad_out is not None:
        write_nads(options.nad_out, result.networks)
    return report


def nad_file_name(nad: Mapping[str, Any]) -> str:
    meta = nad["metadata"]
    return f"{meta['namespace']}.{meta['name']}.yaml"


def write_nads(folder: Path, networks: Iterable[Rendered]) -> list[Path]:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for rendered in networks:
            path = folder / nad_file_name(rendered.nad)
            path.write_text(nads_yaml([rendered]))
            written.append(path)
    except OSError as exc:
        raise ApplyError([f"cannot write NADs into {folder}: {exc}"]) from None
    return written


def nads_yaml(networks: Iterable[Rendered]) -> str:
    text: str = yaml.safe_dump_all(
        [r.nad for r in networks], sort_keys=False, default_flow_style=False
    )
    return text


# ----------------------------------------------------------------- helpers


def _skip_reason(doc: Document) -> str:
    if not doc.kind:
        return f"{doc.where}: not a Kubernetes object (no kind): skipped"
    return (
        f"{doc.describe()}: kind {doc.kind} ({doc.api_version or 'no apiVersion'}) "
        "is not railyard's: skipped"
    )


def _file_pools(pool_docs: Sequence[Document], errors: list[str]) -> set[str]:
    """Names of the file's pools, each checked by ipamd's own parser."""
    names: set[str] = set()
    for doc in pool_docs:
        try:
            pools, reserved = parse_manifest(documents.pools_manifest([doc]))
        except PoolError as exc:
            reason = str(exc).removeprefix("document 1: ")
            # ipamd's reason names the kind and the pool already
            errors.append(f"{doc.where}: {reason}")
            continue
        names |= {p.name for p in pools}
    return names


def _networks(
    docs: Sequence[Document],
    options: Options,
    errors: list[str],
    warnings: list[str],
) -> list[Rendered]:
    out = []
    for doc in docs:
        try:
            net = parse(doc.body, where=doc.where)
        except NetworkError as exc:
            errors.append(f"{doc.describe()}: {exc}")
            continue
        device = options.device_ids.get(net.resource_name, "")
        pf_mtu = pf_mtu_of(device, options.sysfs_root) if device else None
        problems = validate.validate(net, pf_mtu=pf_mtu)
        if problems:
            errors += [
                f"{doc.where}: SpiderMultusConfig {net.key}: {p}" for p in problems
            ]
            continue
        if net.unknown_keys:
            warnings.append(
                f"{doc.where}: SpiderMultusConfig {net.key}: spec keys "
                f"{', '.join(net.unknown_keys)} are unknown and ignored"
            )
        if net.coordinator.ignored:
            warnings.append(
                f"{doc.where}: SpiderMultusConfig {net.key}: coordinator "
                f"{', '.join(net.coordinator.ignored)} have no equivalent in "
                "railyard's plugins and are ignored"
            )
        out.append(Rendered(net, render.conflist(net), render.nad(net)))
    return out


def _duplicates(networks: Sequence[Rendered], options: Options) -> list[str]:
    errors = []
    seen_nad: dict[tuple[str, str], str] = {}
    seen_conflist: dict[str, str] = {}
    for rendered in networks:
        net = rendered.network
        nad_key = (net.namespace, net.nad_name)
        if nad_key in seen_nad:
            errors.append(
                f"{net.where}: SpiderMultusConfig {net.key}: the net-attach-def "
                f"{net.namespace}/{net.nad_name} is also rendered by "
                f"{seen_nad[nad_key]}"
            )
        seen_nad.setdefault(nad_key, net.key)
        if options.conf_dir is not None:
            name = net.conflist_name
            if name in seen_conflist:
                errors.append(
                    f"{net.where}: SpiderMultusConfig {net.key}: conflist name "
                    f"{name} is also used by {seen_conflist[name]} (one conf dir "
                    "holds one network per name)"
                )
            seen_conflist.setdefault(name, net.key)
    return errors


def _with_device(rendered: Rendered, device_ids: Mapping[str, str]) -> dict[str, Any]:
    device = device_ids.get(rendered.network.resource_name, "")
    if not device:
        return rendered.conflist
    return render.conflist(rendered.network, device_id=device)


def pf_mtu_of(vf_pci: str, sysfs_root: Path) -> int | None:
    """The MTU of the PF behind VF ``vf_pci``: ``physfn/net/<pf>/mtu`` under
    ``sysfs_root``, else the PF netdev's ``/sys/class/net/<pf>/mtu`` (a PCI
    tree made for a simulated host names the netdev without the class dir)."""
    net_dir = sysfs_root / "bus" / "pci" / "devices" / vf_pci / "physfn" / "net"
    try:
        netdevs = sorted(net_dir.iterdir())
    except OSError:
        return None
    for netdev in netdevs:
        for mtu in (netdev / "mtu", Path("/sys/class/net") / netdev.name / "mtu"):
            try:
                return int(mtu.read_text().strip())
            except (OSError, ValueError):
                continue
    return None
