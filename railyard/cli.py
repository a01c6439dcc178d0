# SPDX-License-Identifier: Apache-2.0
"""The ``railyard`` command (click): apply, get networks, delete network, webhook, gc.

Output follows kubectl's habits: one ``kind/name verb`` line per object on
stdout; errors on stderr, one per line, exit status 1, no traceback. With
``-o yaml`` stdout carries only the NetworkAttachmentDefinitions (for a pipe
into ``kubectl apply -f -``) and the report goes to stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from railyard.confdir import DEFAULT_CONF_DIR

SOCKET_ENV = "RAILYARD_IPAMD_SOCKET"
DEFAULT_SOCKET = "/run/railyard/ipamd.sock"


F = TypeVar("F", bound=Callable[..., Any])


#: How a command reaches the Kubernetes API from outside the cluster.
_KUBECONFIG = click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="out-of-cluster access; in a pod the service account is used",
)


def _ipamd_options(func: F) -> F:
    """How a command reaches ipamd: ``target``, ``tls_*``, ``timeout``."""
    for option in reversed(
        [
            click.option(
                "--socket",
                "target",
                envvar=SOCKET_ENV,
                default=DEFAULT_SOCKET,
                show_default=True,
                help=f"ipamd socket path or host:port (env {SOCKET_ENV})",
            ),
            click.option("--tls-ca", type=click.Path(exists=True, path_type=Path)),
            click.option("--tls-cert", type=click.Path(exists=True, path_type=Path)),
            click.option("--tls-key", type=click.Path(exists=True, path_type=Path)),
            click.option("--timeout", default=30.0, show_default=True),
        ]
    ):
        func = option(func)
    return func


@click.group()
@click.version_option(package_name="railyard-cni", prog_name="railyard")
def main() -> None:
    """railyard: networks and pools from the reference setup's YAML."""


def _fail(errors: list[str]) -> NoReturn:
    for line in errors:
        click.echo(f"error: {line}", err=True)
    sys.exit(1)


def _device_ids(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for value in values:
        resource, sep, pci = value.partition("=")
        if not sep or not resource or not pci:
            raise click.BadParameter(
                f"{value!r}: use RESOURCE=PCI, "
                "e.g. spidernet.io/gpu1sriov=0000:af:00.2",
                param_hint="--device-id",
            )
        out[resource] = pci
    return out


@main.command()
@click.option(
    "-f",
    "--filename",
    "paths",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True),
    help="YAML with SpiderIPPool, SpiderReservedIP, SpiderMultusConfig "
    "(multi-document; '-' reads stdin; repeatable).",
)
@click.option(
    "--cni-conf-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"write conflists here [default: {DEFAULT_CONF_DIR}, unless --nad-out "
    "or -o yaml is given]",
)
@click.option(
    "--nad-out",
    type=click.Path(file_okay=False, path_type=Path),
    help="write NetworkAttachmentDefinitions (one file each) here",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["yaml"]),
    help="print the NetworkAttachmentDefinitions on stdout",
)
@click.option("--dry-run", is_flag=True, help="validate and show what would change")
@click.option(
    "--device-id",
    "device_ids",
    multiple=True,
    metavar="RESOURCE=PCI",
    help="pin a VF into the conflists of that resource, for runtimes without "
    "a device plugin (podman, ctr); repeatable",
)
@click.option(
    "--sysfs-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/sys"),
    show_default=True,
    help="where the PF of a --device-id is looked up (MTU check)",
)
@_ipamd_options
@click.option(
    "--no-ipamd",
    is_flag=True,
    help="render networks without asking ipamd (pools checked against the file)",
)
def apply(
    paths: tuple[str, ...],
    cni_conf_dir: Path | None,
    nad_out: Path | None,
    output: str | None,
    dry_run: bool,
    device_ids: tuple[str, ...],
    sysfs_root: Path,
    target: str,
    tls_ca: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    timeout: float,
    no_ipamd: bool,
) -> None:
    """Pools to ipamd, networks to conflists and/or NetworkAttachmentDefinitions.

    The whole input is validated first (pools included, by ipamd); on any
    error nothing is changed.
    """
    from railyard import apply as applying
    from railyard import documents
    from railyard.ipamd_link import GrpcIpamd, IpamdPools

    report_err = output == "yaml"

    def say(line: str) -> None:
        click.echo(line, err=report_err)

    sources = []
    for path in paths:
        try:
            with click.open_file(path) as stream:
                sources.append((path if path != "-" else "<stdin>", stream.read()))
        except OSError as exc:
            _fail([f"{path}: {exc.strerror or exc}"])
    try:
        docs = documents.load(sources)
    except documents.DocumentError as exc:
        _fail([str(exc)])
    if cni_conf_dir is None and nad_out is None and output is None:
        cni_conf_dir = DEFAULT_CONF_DIR
    options = applying.Options(
        conf_dir=cni_conf_dir,
        nad_out=nad_out,
        dry_run=dry_run,
        device_ids=_device_ids(device_ids),
        sysfs_root=sysfs_root,
    )
    ipamd: IpamdPools | None = None
    client = None
    if not no_ipamd:
        client = GrpcIpamd(target, timeout, tls_ca, tls_cert, tls_key)
        ipamd = client
    try:
        plan = applying.plan(docs, ipamd, options)
        report = plan.pool_report
        if not dry_run:
            report = applying.execute(plan, ipamd, options) or report
    except applying.ApplyError as exc:
        _fail(exc.errors)
    finally:
        if client is not None:
            client.close()

    suffix = " (dry run)" if dry_run else ""
    for line in plan.skipped:
        say(f"skipped: {line}")
    for line in plan.warnings:
        click.echo(f"warning: {line}", err=True)
    if report is not None:
        for verb, names in (
            ("created", report.created),
            ("configured", report.configured),
            ("unchanged", report.unchanged),
        ):
            for name in names:
                say(f"{name.lower()} {verb}{suffix}")
    for change in plan.conf_changes:
        say(
            f"network {change.record.source}: {change.record.file} "
            f"{change.status}{suffix}"
        )
    if nad_out is not None:
        for rendered in plan.networks:
            nad_path = nad_out / applying.nad_file_name(rendered.nad)
            say(
                f"networkattachmentdefinition {rendered.network.namespace}/"
                f"{rendered.network.nad_name}: {nad_path} "
                f"{'would be written' if dry_run else 'written'}"
            )
    if output == "yaml":
        click.echo(applying.nads_yaml(plan.networks), nl=False)


@main.command()
@click.option(
    "--sysfs",
    "sysfs_root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/sys"),
    show_default=True,
    help="the sysfs to read: another root for a tree copied off a node",
)
@click.option("--json", "as_json", is_flag=True, help="the same as JSON")
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "yaml"]),
    default="table",
    show_default=True,
    help="yaml: this node's SriovNetworkNodePolicies, SpiderIPPools and "
    "SpiderMultusConfigs, for railyard apply",
)
@click.option("--node", help="the node the policies select [default: hostname]")
@click.option("--namespace", default="spiderpool", show_default=True)
@click.option(
    "--num-vfs",
    type=click.IntRange(1, 256),
    help="VFs per PF [default: the PF's sriov_numvfs, else sriov_totalvfs]",
)
@click.option(
    "--rdma-name",
    default="rail{rail}",
    show_default=True,
    help="the pod's RDMA device name per rail; {rail} is the rail number",
)
@click.option("--roce-tos", type=int, help="TOS of the rails' RoCE traffic (0-255)")
def rails(
    sysfs_root: Path,
    as_json: bool,
    output: str,
    node: str | None,
    namespace: str,
    num_vfs: int | None,
    rdma_name: str,
    roce_tos: int | None,
) -> None:
    """Which NIC serves which GPU on this node, from sysfs alone.

    Pairs each GPU with its closest RDMA NIC (nvidia-smi's PIX < PXB < PHB <
    NODE; equally close: a NIC no earlier GPU took, then the lowest PCI
    address; across sockets: none) and says which GPUs share a NIC or have
    none.
    """
    import socket

    from cni.kernel import InvalidArgument
    from cni.kernel.rdma_rules import check_device_name, check_roce_tos
    from railyard import rails_output
    from railyard.rails import RailsError, discover, pair

    try:
        check_device_name(rdma_name.replace("{rail}", "1"))
        if roce_tos is not None:
            check_roce_tos(roce_tos)
        pairing = pair(discover(sysfs_root))
    except (RailsError, InvalidArgument) as exc:
        _fail([str(exc)])
    if as_json:
        click.echo(rails_output.as_json(pairing), nl=False)
        return
    if output == "yaml":
        import yaml

        docs = rails_output.documents(
            pairing,
            node or socket.gethostname(),
            namespace=namespace,
            num_vfs=num_vfs,
            name_template=rdma_name,
            roce_tos=roce_tos,
        )
        for note in pairing.notes:
            click.echo(f"note: {note}", err=True)
        click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)
        return
    click.echo(rails_output.table(pairing), nl=False)


@main.group()
def get() -> None:
    """Show what railyard manages."""


@get.command("networks")
@click.option(
    "--cni-conf-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_CONF_DIR,
    show_default=True,
)
@click.option("-o", "--output", type=click.Choice(["json"]))
def get_networks(cni_conf_dir: Path, output: str | None) -> None:
    """The networks railyard wrote into the CNI conf dir."""
    from railyard.confdir import ConfDir

    records = ConfDir(cni_conf_dir).records()
    if output == "json":
        click.echo(json.dumps([r.to_json() for r in records], indent=2))
        return
    rows = [
        [r.name, r.cni_type, r.resource_name or "-", ",".join(r.pools) or "-", r.source]
        for r in records
    ]
    _table(["NAME", "TYPE", "RESOURCE", "POOLS", "FROM"], rows)


@main.group()
def delete() -> None:
    """Remove what railyard manages."""


@delete.command("network")
@click.argument("name")
@click.option(
    "--cni-conf-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_CONF_DIR,
    show_default=True,
)
def delete_network(name: str, cni_conf_dir: Path) -> None:
    """Remove network NAME (its conflist name, or the SpiderMultusConfig's
    namespace/name) from the conf dir. Its pools stay in ipamd."""
    from railyard.confdir import ConfDir, ConfDirError

    try:
        record = ConfDir(cni_conf_dir).delete(name)
    except ConfDirError as exc:
        _fail([str(exc)])
    click.echo(f"network {record.name} deleted ({record.file})")


@main.group()
def webhook() -> None:
    """The pod resource-inject admission webhook."""


@webhook.command("serve")
@click.option("--cert", required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--key", required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--listen", default="0.0.0.0:9443", show_default=True)
@_KUBECONFIG
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
def webhook_serve(
    cert: Path, key: Path, listen: str, kubeconfig: Path | None, log_level: str
) -> None:
    """Serve AdmissionReview (admission.k8s.io/v1) on HTTPS until SIGTERM."""
    import importlib.util
    import logging

    if importlib.util.find_spec("kubernetes") is None:
        raise click.ClickException(
            "the webhook needs the Kubernetes client: pip install "
            "'railyard-cni[webhook]' (packaging/install.sh --with-webhook)"
        )
    from ipamd.http_endpoint import parse_listen
    from railyard.webhook.kube import KubeError, KubernetesApi
    from railyard.webhook.server import serve

    logging.basicConfig(
        level=log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        host, port = parse_listen(listen, default_host="0.0.0.0")
        api = (
            KubernetesApi.from_kubeconfig(kubeconfig)
            if kubeconfig
            else KubernetesApi.in_cluster()
        )
        serve(api, host, port, cert, key)
    except (KubeError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.option(
    "--dry-run", is_flag=True, help="list what would be released; change nothing"
)
@click.option(
    "--every",
    type=click.FloatRange(min=1.0),
    default=None,
    metavar="SECONDS",
    help="run a round every SECONDS until SIGTERM (a Deployment); default: once "
    "(a CronJob)",
)
@_KUBECONFIG
@click.option(
    "--page-size",
    default=500,
    show_default=True,
    type=click.IntRange(min=1),
    help="pods asked for per page of the API's list",
)
@_ipamd_options
def gc(
    dry_run: bool,
    every: float | None,
    kubeconfig: Path | None,
    page_size: int,
    target: str,
    tls_ca: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    timeout: float,
) -> None:
    """Release the addresses of pods that no longer exist (by pod UID).

    Sticky addresses of StatefulSet pods stay held while the StatefulSet
    exists. Any failed read of the Kubernetes API releases nothing; an
    unreachable ipamd is tried again at the next round.
    """
    import importlib.util
    import signal
    import threading

    if importlib.util.find_spec("kubernetes") is None:
        raise click.ClickException(
            "railyard gc needs the Kubernetes client: pip install "
            "'railyard-cni[webhook]' (packaging/install.sh --with-webhook)"
        )
    from railyard import gc as collecting
    from railyard.ipamd_link import GrpcIpamd, IpamdError
    from railyard.kube import KubeError, in_cluster_client, kubeconfig_client

    try:
        api = kubeconfig_client(kubeconfig) if kubeconfig else in_cluster_client()
    except KubeError as exc:
        raise click.ClickException(str(exc)) from None
    cluster = collecting.KubeCluster(api, page=page_size, timeout=timeout)
    stop = threading.Event()
    if every is not None:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    failed = False
    try:
        while True:
            try:
                with GrpcIpamd(target, timeout, tls_ca, tls_cert, tls_key) as ipamd:
                    report = collecting.run_once(ipamd, cluster, dry_run, click.echo)
                click.echo(collecting.summary(report, dry_run), err=True)
                failed = False
            except KubeError as exc:
                failed = True
                click.echo(f"error: {exc}; nothing released", err=True)
            except IpamdError as exc:
                failed = True
                later = "next round" if every is not None else "next run"
                click.echo(f"error: {exc}; tried again at the {later}", err=True)
            if every is None or stop.wait(every):
                break
    finally:
        cluster.close()
    if failed:
        sys.exit(1)


def _table(headers: list[str], rows: list[list[Any]]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(str(c))) for w, c in zip(widths, row, strict=True)]
    for row in [headers, *rows]:
        click.echo(
            "  ".join(
                str(c).ljust(w) for c, w in zip(row, widths, strict=True)
            ).rstrip()
        )
