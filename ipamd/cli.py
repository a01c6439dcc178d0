# SPDX-License-Identifier: Apache-2.0
"""The ``ipamd`` command: ``serve`` and the admin commands (click).

Server-side tool (imports click, grpc). Admin commands talk to the running
daemon over its socket (``--socket`` / env RAILYARD_IPAMD_SOCKET), never to the
database behind its back, so they see exactly what allocations see (``db``
works on the database itself, for moves between stores). Output is
a human table by default and JSON with ``--json``; errors exit non-zero with
ipamd's reason on stderr.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from ipamd.settings import (
    DB_ENV,
    DEFAULT_DB_URL,
    DEFAULT_SOCKET,
    SOCKET_ENV,
    Settings,
)

F = TypeVar("F", bound=Callable[..., Any])

#: Seconds an admin command keeps retrying when no replica answers: enough for
#: a standby to take over, short enough for a person waiting at a prompt.
CLI_RETRY_WINDOW = 3.0


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="railyard-cni", prog_name="ipamd")
def main() -> None:
    """ipamd: the Railyard IP pool daemon (Spiderpool's SpiderIPPool model)."""


@main.command()
@click.option(
    "--db",
    "db_url",
    default=DEFAULT_DB_URL,
    show_default=True,
    envvar=DB_ENV,
    help="SQLAlchemy URL of the store: sqlite:////path, "
    "postgresql+psycopg://user:password@host/db, or 'memory' "
    f"(env {DB_ENV}, which keeps a password out of the process list).",
)
@click.option(
    "--listen",
    default=f"unix://{DEFAULT_SOCKET}",
    show_default=True,
    help="unix:///path, a socket path, or host:port (TCP needs TLS).",
)
@click.option("--tls-cert", type=click.Path(exists=True, path_type=Path))
@click.option("--tls-key", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--client-ca",
    type=click.Path(exists=True, path_type=Path),
    help="CA of client certificates: enables mutual TLS.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
@click.option(
    "--lease-ttl",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.2, 60.0),
    help="Seconds a dead or hung active replica keeps the writer lease.",
)
@click.option(
    "--health-listen",
    default="",
    help="host:port of an HTTP probe endpoint (/readyz: 200 when active).",
)
@click.option(
    "--metrics-listen",
    default="",
    help="HOST:PORT to serve Prometheus /metrics on (off by default).",
)
@click.option(
    "--node-name",
    envvar="RAILYARD_NODE_NAME",
    default="",
    help="the node this daemon runs on: a node agent on the unix socket may "
    "reconcile this node's allocations only (env RAILYARD_NODE_NAME; default "
    "the hostname)",
)
@click.option(
    "--node-reconcile-grace",
    default=120.0,
    show_default=True,
    type=click.FloatRange(0.0),
    help="seconds an allocation no node attachment explains is kept before a "
    "node's report releases it",
)
def serve(
    db_url: str,
    listen: str,
    tls_cert: Path | None,
    tls_key: Path | None,
    client_ca: Path | None,
    log_level: str,
    lease_ttl: float,
    health_listen: str,
    metrics_listen: str,
    node_name: str,
    node_reconcile_grace: float,
) -> None:
    """Run the daemon until SIGTERM."""
    import socket

    from ipamd.server import ConfigError
    from ipamd.server import serve as run

    logging.basicConfig(
        level=log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = Settings(
        db_url=db_url,
        listen=listen,
        tls_cert=tls_cert,
        tls_key=tls_key,
        client_ca=client_ca,
        lease_ttl=lease_ttl,
        health_listen=health_listen,
        metrics_listen=metrics_listen,
        node_name=node_name or socket.gethostname(),
        node_reconcile_grace=node_reconcile_grace,
    )
    try:
        run(settings)
    except (ConfigError, OSError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None


# -- admin commands -------------------------------------------------------


def _admin(func: F) -> F:
    """Connection options shared by every admin command, and error handling."""

    @click.option(
        "--socket",
        "target",
        envvar=SOCKET_ENV,
        default=str(DEFAULT_SOCKET),
        show_default=True,
        help=f"ipamd socket path or host:port, comma-separated for replicas "
        f"(env {SOCKET_ENV}).",
    )
    @click.option(
        "--tls-ca",
        type=click.Path(exists=True, path_type=Path),
        help="CA of the server certificate (TCP).",
    )
    @click.option(
        "--tls-cert",
        type=click.Path(exists=True, path_type=Path),
        help="client certificate (mutual TLS).",
    )
    @click.option("--tls-key", type=click.Path(exists=True, path_type=Path))
    @click.option("--timeout", default=30.0, show_default=True)
    @click.option("--json", "as_json", is_flag=True, help="machine-readable output")
    @functools.wraps(func)
    def wrapper(
        target: str,
        tls_ca: Path | None,
        tls_cert: Path | None,
        tls_key: Path | None,
        timeout: float,
        as_json: bool,
        **kwargs: Any,
    ) -> Any:
        from ipamd.client import IpamdCallError, IpamdClient

        try:
            client = IpamdClient(
                target,
                timeout,
                tls_ca,
                tls_cert,
                tls_key,
                retry_window=min(timeout, CLI_RETRY_WINDOW),
            )
            with client:
                return func(client=client, as_json=as_json, **kwargs)
        except IpamdCallError as err:
            raise click.ClickException(explain(err)) from None
        except OSError as exc:  # a TLS file that cannot be read
            raise click.ClickException(
                f"{exc.filename or 'ipamd'}: {exc.strerror or exc}"
            ) from None
        except ValueError as exc:  # no endpoint in --socket
            raise click.BadParameter(str(exc), param_hint="--socket") from None

    return cast(F, wrapper)  # functools.wraps kept the signature click reads


def explain(err: Any) -> str:
    """One line for a failed call (an ``ipamd.client.IpamdCallError``)."""
    from ipamd.client import MAX_MESSAGE_BYTES

    if err.unreachable:
        where = ", ".join(dict.fromkeys(a.target for a in err.attempts))
        return (
            f"ipamd is not reachable at {where} ({err.code.name}: {err.details}"
            f"{f', for {err.gave_up_after:.1f}s' if err.gave_up_after else ''}); "
            f"point the CLI at its socket with --socket PATH or {SOCKET_ENV}=PATH "
            "(several replicas: comma-separated)"
        )
    if err.code.name == "RESOURCE_EXHAUSTED" and "larger than max" in err.details:
        return (
            f"the request is larger than ipamd accepts ({MAX_MESSAGE_BYTES // 2**20} "
            "MiB): write consecutive addresses in ips/excludeIPs as one range "
            "'first-last' instead of one per line, or split the file"
        )
    # One line whatever the daemon said (its reasons are one line; this keeps
    # an older daemon's multi-line ones from breaking scripts reading stderr).
    return f"{err.code.name}: {' '.join(err.details.split())}"


def _call(client: Any, method: str, request: Any) -> Any:
    # Reads and declarative applies are safe to resend after a timeout.
    idempotent = method.startswith(("Get", "List", "Apply", "Status"))
    return client.call(method, request, idempotent=idempotent)


def _pb() -> Any:
    from ipamd.api.v1 import ipam_pb2

    return ipam_pb2


def _version() -> str:
    from ipamd.api.v1.version import API_VERSION

    return API_VERSION


def _table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    for row in [headers, *rows]:
        click.echo(
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        )


def _pool_dict(info: Any) -> dict[str, Any]:
    p = info.pool
    out: dict[str, Any] = {
        "name": p.name,
        "ipVersion": p.ip_version,
        "subnet": p.subnet,
        "ips": list(p.ips),
        "excludeIPs": list(p.exclude_ips),
        "gateway": p.gateway or None,
        "routes": [{"dst": r.dst, "gw": r.gw} for r in p.routes],
        "default": p.default,
        "disable": p.disable,
        "nodeName": list(p.node_name),
        "namespaceName": list(p.namespace_name),
        "multusName": list(p.multus_name),
        "totalIPCount": int(info.total_count),
        "allocatedIPCount": int(info.allocated_count),
    }
    return out


def _echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


@main.group()
def pool() -> None:
    """SpiderIPPool / SpiderReservedIP management."""


@pool.command("apply")
@click.option(
    "-f",
    "--filename",
    "path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="Spiderpool YAML (multi-document); '-' reads stdin.",
)
@click.option("--dry-run", is_flag=True, help="validate only")
@_admin
def pool_apply(client: Any, as_json: bool, path: str, dry_run: bool) -> None:
    """Create or update pools and reserved IPs from Spiderpool YAML."""
    from ipamd.manifest import check_nesting
    from ipamd.pools import PoolError

    text = read_manifest(path)
    try:
        check_nesting(text)
    except PoolError as exc:
        raise click.ClickException(f"{_name(path)}: {exc}") from None
    pb = _pb()
    reply = _call(
        client,
        "ApplyPools",
        pb.ApplyPoolsRequest(client_version=_version(), manifest=text, dry_run=dry_run),
    )
    if as_json:
        _echo_json(
            {
                "created": list(reply.created),
                "configured": list(reply.configured),
                "unchanged": list(reply.unchanged),
                "dryRun": dry_run,
            }
        )
        return
    suffix = " (dry run)" if dry_run else ""
    for verb, names in (
        ("created", reply.created),
        ("configured", reply.configured),
        ("unchanged", reply.unchanged),
    ):
        for name in names:
            click.echo(f"{name} {verb}{suffix}")


def _name(path: str) -> str:
    return "standard input" if path == "-" else path


def read_manifest(path: str) -> str:
    """The pool file as text, or a one-line error naming the file and what is
    wrong with it: ipamd reads UTF-8 (with or without a byte-order mark), as
    kubectl does, and refuses a request over the gRPC message limit."""
    from ipamd.client import MAX_MESSAGE_BYTES

    name = _name(path)
    try:
        with click.open_file(path, "rb") as stream:
            # One byte past the limit is enough to know it is too large.
            raw: bytes = stream.read(MAX_MESSAGE_BYTES + 1)
    except OSError as exc:
        raise click.ClickException(f"{name}: {exc.strerror or exc}") from None
    if len(raw) > MAX_MESSAGE_BYTES - 1024:  # room for the request's other fields
        raise click.ClickException(
            f"{name} is larger than ipamd accepts in one apply "
            f"({MAX_MESSAGE_BYTES // 2**20} MiB): write consecutive addresses in "
            "ips/excludeIPs as one range 'first-last' instead of one per line, or "
            "split the file"
        )
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise click.ClickException(
            f"{name} is UTF-16 (it starts with a UTF-16 byte-order mark); ipamd "
            f"reads UTF-8: convert it, e.g. iconv -f UTF-16 -t UTF-8 {name}"
        )
    if b"\x00" in raw:
        raise click.ClickException(
            f"{name} holds NUL bytes: it is not a UTF-8 text file (UTF-16 without "
            f"a byte-order mark?); convert it, e.g. iconv -f UTF-16LE -t UTF-8 {name}"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise click.ClickException(
            f"{name} is not UTF-8: byte 0x{raw[exc.start]:02x} on line {line} "
            f"(offset {exc.start}) is not valid UTF-8; if the file is Latin-1, "
            f"convert it, e.g. iconv -f LATIN1 -t UTF-8 {name}"
        ) from None


@pool.command("list")
@_admin
def pool_list(client: Any, as_json: bool) -> None:
    """Pools with their usage."""
    pb = _pb()
    reply = _call(client, "ListPools", pb.ListPoolsRequest(client_version=_version()))
    pools = [_pool_dict(p) for p in reply.pools]
    reserved = [
        {"name": r.name, "ipVersion": r.ip_version, "ips": list(r.ips)}
        for r in reply.reserved
    ]
    if as_json:
        _echo_json({"pools": pools, "reserved": reserved})
        return
    _table(
        [
            "NAME",
            "VERSION",
            "SUBNET",
            "GATEWAY",
            "ALLOCATED",
            "TOTAL",
            "DEFAULT",
            "DISABLE",
        ],
        [
            [
                p["name"],
                str(p["ipVersion"]),
                p["subnet"],
                p["gateway"] or "",
                str(p["allocatedIPCount"]),
                str(p["totalIPCount"]),
                str(p["default"]).lower(),
                str(p["disable"]).lower(),
            ]
            for p in pools
        ],
    )
    if reserved:
        click.echo("")
        _table(
            ["RESERVED", "VERSION", "IPS"],
            [[r["name"], str(r["ipVersion"]), ",".join(r["ips"])] for r in reserved],
        )


@pool.command("get")
@click.argument("name")
@_admin
def pool_get(client: Any, as_json: bool, name: str) -> None:
    """One pool with its usage."""
    pb = _pb()
    info = _call(
        client, "GetPool", pb.GetPoolRequest(client_version=_version(), name=name)
    )
    data = _pool_dict(info)
    if as_json:
        _echo_json(data)
        return
    width = max(len(k) for k in data)
    for key, val in data.items():
        if isinstance(val, list):
            val = ", ".join(
                f"{v['dst']} via {v['gw'] or 'on-link'}" if isinstance(v, dict) else v
                for v in val
            )
        click.echo(f"{key.ljust(width)}  {'' if val is None else val}")


@pool.command("delete")
@click.argument("name")
@click.option("--reserved", is_flag=True, help="NAME is a SpiderReservedIP")
@_admin
def pool_delete(client: Any, as_json: bool, name: str, reserved: bool) -> None:
    """Delete a pool (refused while it has allocations) or a reserved-IP set."""
    pb = _pb()
    kind = "SpiderReservedIP" if reserved else "SpiderIPPool"
    _call(
        client,
        "DeletePool",
        pb.DeletePoolRequest(client_version=_version(), name=name, kind=kind),
    )
    if as_json:
        _echo_json({"deleted": f"{kind}/{name}"})
    else:
        click.echo(f"{kind}/{name} deleted")


@main.group()
def alloc() -> None:
    """Allocations (leases)."""


@alloc.command("list")
@click.option("--network", default="")
@click.option("--pool", "pool_name", default="")
@click.option("--container-id", default="")
@click.option("--pod-namespace", default="")
@click.option("--pod-name", default="")
@click.option("--node", default="")
@_admin
def alloc_list(
    client: Any,
    as_json: bool,
    network: str,
    pool_name: str,
    container_id: str,
    pod_namespace: str,
    pod_name: str,
    node: str,
) -> None:
    """Allocations, optionally filtered."""
    pb = _pb()
    reply = _call(
        client,
        "ListAllocations",
        pb.ListAllocationsRequest(
            client_version=_version(),
            network=network,
            pool=pool_name,
            container_id=container_id,
            pod_namespace=pod_namespace,
            pod_name=pod_name,
            node=node,
        ),
    )
    rows = [
        {
            "pool": a.pool,
            "ip": a.ip,
            "address": a.address,
            "version": a.version,
            "network": a.network,
            "containerID": a.container_id or None,
            "ifname": a.ifname,
            "netns": a.netns,
            "podNamespace": a.pod_namespace,
            "podName": a.pod_name,
            "podUID": a.pod_uid,
            "node": a.node,
            "sticky": a.sticky,
            "createdAt": a.created_at,
        }
        for a in reply.allocations
    ]
    if as_json:
        _echo_json(rows)
        return
    _table(
        ["POOL", "IP", "NETWORK", "CONTAINER", "IFNAME", "POD", "NODE"],
        [
            [
                r["pool"],
                r["ip"],
                r["network"],
                (r["containerID"] or "(held)")[:12],
                r["ifname"],
                f"{r['podNamespace']}/{r['podName']}" if r["podName"] else "",
                r["node"],
            ]
            for r in rows
        ],
    )


@alloc.command("release")
@click.argument("container_id", required=False, default="")
@click.argument("ifname", required=False, default="")
@click.option("--pool", "pool_name", default="", help="release one address: pool")
@click.option("--ip", default="", help="release one address: ip")
@_admin
def alloc_release(
    client: Any, as_json: bool, container_id: str, ifname: str, pool_name: str, ip: str
) -> None:
    """Release CONTAINER_ID IFNAME's addresses, or one --pool/--ip address."""
    if not (container_id and ifname) and not (pool_name and ip):
        raise click.UsageError("give CONTAINER_ID IFNAME, or --pool and --ip")
    pb = _pb()
    reply = _call(
        client,
        "ReleaseAllocation",
        pb.ReleaseAllocationRequest(
            client_version=_version(),
            container_id=container_id,
            ifname=ifname,
            pool=pool_name,
            ip=ip,
        ),
    )
    if as_json:
        _echo_json({"released": reply.released})
    else:
        click.echo(f"released {reply.released} address(es)")


@main.command()
@click.option("--network", default="", help="only this network")
@click.option(
    "--valid",
    "valid",
    multiple=True,
    metavar="CID/IFNAME",
    help="an attachment to keep (repeatable)",
)
@click.option(
    "--all",
    "release_all",
    is_flag=True,
    help="no attachment is valid: release every one (of --network)",
)
@_admin
def gc(
    client: Any,
    as_json: bool,
    network: str,
    valid: tuple[str, ...],
    release_all: bool,
) -> None:
    """Release every attachment not listed with --valid (CNI GC semantics)."""
    if not valid and not release_all:
        # An empty valid list means "release everything": make it explicit.
        raise click.UsageError(
            "give the attachments to keep with --valid CID/IFNAME, or --all"
        )
    pb = _pb()
    attachments = []
    for item in valid:
        cid, sep, ifname = item.partition("/")
        if not sep or not cid or not ifname:
            raise click.BadParameter(
                f"{item!r} is not CID/IFNAME", param_hint="--valid"
            )
        attachments.append(pb.Attachment(container_id=cid, ifname=ifname))
    reply = _call(
        client,
        "GarbageCollect",
        pb.GarbageCollectRequest(
            client_version=_version(), network=network, valid=attachments
        ),
    )
    if as_json:
        _echo_json(
            {
                "releasedAttachments": reply.released_attachments,
                "releasedAddresses": reply.released_addresses,
            }
        )
    else:
        click.echo(
            f"released {reply.released_attachments} attachment(s), "
            f"{reply.released_addresses} address(es)"
        )


@main.command()
@_admin
def status(client: Any, as_json: bool) -> None:
    """Daemon health (exit 1 when not ready)."""
    # The active replica's answer when there are several (standbys: not ready).
    reply = client.status()
    data = {
        "ready": reply.ready,
        "message": reply.message,
        "serverVersion": reply.server_version,
        "apiVersion": reply.api_version,
        "pools": reply.pools,
        "allocations": reply.allocations,
        "role": reply.role,
        "leaseHolder": reply.lease_holder,
        "database": reply.database,
    }
    if as_json:
        _echo_json(data)
    else:
        for key, val in data.items():
            click.echo(f"{key:<14}{val}")
    if not reply.ready:
        sys.exit(1)


# -- database moves --------------------------------------------------------


@main.group()
def db() -> None:
    """Export and import a database (e.g. SQLite -> PostgreSQL and back)."""


_DB_OPTION = click.option(
    "--db",
    "db_url",
    default=DEFAULT_DB_URL,
    show_default=True,
    envvar=DB_ENV,
    help=f"SQLAlchemy URL of the database (env {DB_ENV}).",
)


def _open_db(db_url: str) -> Any:
    from ipamd.server import ConfigError, open_store

    try:
        return open_store(db_url)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@db.command("dump")
@_DB_OPTION
@click.option(
    "-o", "--output", type=click.File("w"), default="-", help="file (default stdout)"
)
def db_dump(db_url: str, output: Any) -> None:
    """Write pools, reserved IPs and allocations as portable JSON.

    Safe while ipamd runs: it reads one consistent snapshot.
    """
    from ipamd.store.portable import to_dump

    store = _open_db(db_url)
    try:
        snap = store.load()
    finally:
        store.close()
    json.dump(to_dump(snap), output, indent=1, sort_keys=True)
    output.write("\n")
    click.echo(
        f"dumped {len(snap.pools)} pools, {len(snap.reserved)} reserved IPs, "
        f"{len(snap.allocations)} allocations from {store.describe()}",
        err=True,
    )


@db.command("load")
@_DB_OPTION
@click.argument("path", type=click.File("r"))
def db_load(db_url: str, path: Any) -> None:
    """Load a dump into an empty database, while no ipamd runs on it."""
    from ipamd.allocator import AllocState
    from ipamd.errors import IpamdError
    from ipamd.pools import PoolError
    from ipamd.store import StoreError
    from ipamd.store.portable import DumpError, from_dump, load_ops

    try:
        snap = from_dump(json.load(path))
        AllocState(snap)  # the same validation the daemon applies at start
    except (ValueError, DumpError, IpamdError, PoolError) as exc:
        raise click.ClickException(f"{path.name}: {exc}") from None
    store = _open_db(db_url)
    try:
        lease = store.read_lease()
        if lease.remaining > 0:
            raise click.ClickException(
                f"ipamd {lease.holder} is active on {store.describe()}; stop every "
                "replica first (a running daemon would not see the loaded rows)"
            )
        # Holding the lease while loading keeps a replica started meanwhile
        # a standby until the load is complete.
        if store.acquire_lease("ipamd db load", 60.0).holder != "ipamd db load":
            raise click.ClickException("an ipamd replica started meanwhile; stop it")
        current = store.load()
        if current.pools or current.reserved or current.allocations:
            raise click.ClickException(
                f"{store.describe()} is not empty ({len(current.pools)} pools, "
                f"{len(current.allocations)} allocations); load into a new database"
            )
        store.apply(load_ops(snap))
    except StoreError as exc:
        raise click.ClickException(f"{store.describe()}: {exc}") from None
    finally:
        try:
            store.release_lease()
        except StoreError:
            pass  # it expires by itself
        store.close()
    click.echo(
        f"loaded {len(snap.pools)} pools, {len(snap.reserved)} reserved IPs, "
        f"{len(snap.allocations)} allocations into {store.describe()}",
        err=True,
    )
