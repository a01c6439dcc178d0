# SPDX-License-Identifier: Apache-2.0
"""Fuzzing ipamd's two doors: ``ipamd pool apply`` and the gRPC API.

Hypothesis builds SpiderIPPool / SpiderReservedIP documents (valid ones, and
the shapes a careless operator writes: string or huge ipVersion, multicast
subnets, zoned addresses, deep nesting, foreign encodings, garbage) and gRPC
requests (structured with hostile field values, and raw undecodable bytes).
Every example must end in a valid result or a clean refusal: the CLI exits 0
or 1 with one line and no traceback; the daemon answers with a status that
names a reason (never UNKNOWN or INTERNAL) and logs no traceback and nothing
at ERROR.

Budget: the ``ci`` profile (default: 40 derandomized examples per test) keeps
the whole module to a few seconds; ``RAILYARD_FUZZ_PROFILE=soak`` runs 5,000
random examples per test (``RAILYARD_FUZZ_EXAMPLES=N`` sets another count):

    RAILYARD_FUZZ_PROFILE=soak .venv/bin/python -m pytest -q -p no:cacheprovider \\
        tests/unit/ipamd/test_ipamd_fuzz.py
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION
from ipamd.cli import main
from ipamd.manifest import parse_manifest
from ipamd.pools import PoolError
from ipamd.server import Daemon, build
from ipamd.settings import Settings

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "soak",
    max_examples=5000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile(os.environ.get("RAILYARD_FUZZ_PROFILE", "ci"))
if os.environ.get("RAILYARD_FUZZ_EXAMPLES"):
    FUZZ = settings(FUZZ, max_examples=int(os.environ["RAILYARD_FUZZ_EXAMPLES"]))

METHODS = [
    "Allocate",
    "Release",
    "Check",
    "GarbageCollect",
    "Status",
    "ApplyPools",
    "GetPool",
    "ListPools",
    "DeletePool",
    "ListAllocations",
    "ReleaseAllocation",
]
# What a request can be refused with; UNKNOWN and INTERNAL mean ipamd did not
# foresee the input.
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}

# -- strategies ---------------------------------------------------------------

HOSTILE = [
    "",
    " ",
    "fe80::1%eth0",
    "fe80::%eth0/64",
    "172.16.11.9%1",
    "224.0.0.1",
    "224.0.0.0/4",
    "ff02::/16",
    "ff02::1-ff02::ff",
    "10.0.0.1\n",
    "10.0.0.9-10.0.0.1",
    "10.0.0.0/33",
    "::ffff:10.0.0.1",
    "0.0.0.0/0",
    "9" * 5000,
    "x" * 300,
    "\x00",
    "\u202e10.0.0.1",
]

v4 = st.ip_addresses(v=4).map(str)
v6 = st.ip_addresses(v=6).map(str)
address = st.one_of(v4, v6, st.sampled_from(HOSTILE), st.text(max_size=20))
entry = st.one_of(
    address,
    st.tuples(v4, v4).map("-".join),
    st.tuples(v6, v6).map("-".join),
)


def _network(pair: tuple[Any, int]) -> str:
    return str(ipaddress.ip_network(f"{pair[0]}/{pair[1]}", strict=False))


subnet = st.one_of(
    st.tuples(st.ip_addresses(v=4), st.integers(0, 32)).map(_network),
    st.tuples(st.ip_addresses(v=6), st.integers(0, 128)).map(_network),
    st.sampled_from(["172.16.11.0/24", "fd00:11::/64", *HOSTILE]),
    st.text(max_size=20),
)
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
)
ip_version = st.one_of(
    st.none(),
    st.sampled_from([4, 6, 0, 5, "4", "6", "ipv4", "IPv6", True, 4.0, ""]),
    scalar,
)
name = st.one_of(
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
    st.sampled_from(["UPPER", "no", "off", "a\n", "-a", "a" * 300]),
    scalar,
)
name_list = st.one_of(st.lists(st.text(max_size=10), max_size=4), scalar)
route = st.one_of(
    st.fixed_dictionaries(
        {"dst": st.one_of(subnet, scalar)},
        optional={"gw": st.one_of(address, scalar), "via": address, "to": subnet},
    ),
    scalar,
)
pool_spec = st.fixed_dictionaries(
    {},
    optional={
        "ipVersion": ip_version,
        "subnet": st.one_of(subnet, scalar),
        "ips": st.one_of(st.lists(entry, max_size=6), scalar),
        "excludeIPs": st.one_of(st.lists(entry, max_size=6), scalar),
        "gateway": st.one_of(address, scalar),
        "routes": st.one_of(st.lists(route, max_size=3), scalar),
        "default": scalar,
        "disable": scalar,
        "nodeName": name_list,
        "namespaceName": name_list,
        "multusName": name_list,
        "podAffinity": st.dictionaries(st.text(max_size=5), scalar, max_size=2),
        "vlan": scalar,
        "unknown": scalar,
    },
)
reserved_spec = st.fixed_dictionaries(
    {},
    optional={
        "ipVersion": ip_version,
        "ips": st.one_of(st.lists(entry, max_size=6), scalar),
        "extra": scalar,
    },
)


@st.composite
def document(draw: st.DrawFn) -> Any:
    kind = draw(
        st.sampled_from(["SpiderIPPool", "SpiderReservedIP", "SpiderSubnet", None])
    )
    spec = draw(reserved_spec if kind == "SpiderReservedIP" else pool_spec)
    doc: dict[str, Any] = {
        "apiVersion": draw(
            st.sampled_from(
                [
                    "spiderpool.spidernet.io/v2beta1",
                    "spiderpool.spidernet.io/v1",
                    "v1",
                    None,
                ]
            )
        ),
        "kind": kind,
        "metadata": draw(st.one_of(st.fixed_dictionaries({"name": name}), scalar)),
        "spec": draw(st.one_of(st.just(spec), scalar)),
    }
    for key in draw(st.sets(st.sampled_from(list(doc)), max_size=1)):
        del doc[key]
    return doc


def _dump(docs: list[Any]) -> str:
    return yaml.safe_dump_all(docs, allow_unicode=True)


POOL_HEAD = (
    "apiVersion: spiderpool.spidernet.io/v2beta1\nkind: SpiderIPPool\n"
    "metadata: {name: hand}\nspec:\n  subnet: 172.16.11.0/24\n"
    "  ips: [172.16.11.1-172.16.11.9]\n"
)
# Shapes that a YAML serializer never writes but a person (or a broken
# generator) does.
TEXT_SHAPES = [
    POOL_HEAD + "  ipVersion: " + "9" * 5000 + "\n",
    POOL_HEAD + "  ipVersion: '4'\n",
    POOL_HEAD + "  excludeIPs: [" + "[" * 5000 + "]" * 5000 + "]\n",
    "a: " + "[" * 40 + "]" * 40,
    "- " * 3000 + "x\n",
    "".join("  " * i + "k:\n" for i in range(200)),
    "a: &a [*a, *a]\n",
    "a: !!python/object:os.system {}\n",
    "a: !!binary aGVsbG8=\n",
    "\t- tab\n",
    "---\n---\n",
    "kind: List\nitems: 5\n",
    "kind: List\nitems: [1, [2]]\n",
    "{" * 10,
]
manifest_text = st.one_of(
    st.lists(document(), min_size=1, max_size=3).map(_dump),
    st.sampled_from(TEXT_SHAPES),
    st.text(max_size=200),
)
manifest_bytes = st.one_of(
    st.tuples(
        manifest_text,
        st.sampled_from(["utf-8", "utf-8-sig", "latin-1", "utf-16", "utf-16-le"]),
    ).map(lambda t: t[0].encode(t[1], errors="replace")),
    st.binary(max_size=200),
)


def pool_message() -> st.SearchStrategy[pb.Pool]:
    text = st.one_of(address, st.text(max_size=20))
    return st.builds(
        pb.Pool,
        name=st.one_of(name.filter(lambda n: isinstance(n, str)), st.text(max_size=5)),
        ip_version=st.integers(min_value=-(2**31), max_value=2**31 - 1),
        subnet=st.one_of(subnet, st.text(max_size=20)),
        ips=st.lists(entry, max_size=5),
        exclude_ips=st.lists(entry, max_size=5),
        gateway=text,
        routes=st.lists(st.builds(pb.Route, dst=subnet, gw=text), max_size=3),
        default=st.booleans(),
        disable=st.booleans(),
        node_name=st.lists(st.text(max_size=10), max_size=3),
    )


words = st.one_of(
    st.sampled_from(["", "rail1", "c1", "net1", *HOSTILE]), st.text(max_size=30)
)
version = st.one_of(st.just(API_VERSION), st.sampled_from(["1.9", "2.0", "", "x"]))


def request_for(method: str) -> st.SearchStrategy[Any]:
    """A structured request of ``method`` with hostile field values."""
    if method == "Allocate":
        return st.builds(
            pb.AllocateRequest,
            client_version=version,
            network=words,
            container_id=words,
            ifname=words,
            pod_namespace=words,
            pod_name=words,
            ipv4_pools=st.lists(words, max_size=3),
            ipv6_pools=st.lists(words, max_size=3),
            requested_ips=st.lists(entry, max_size=3),
            sticky=st.booleans(),
        )
    if method in ("Release", "Check"):
        cls = pb.ReleaseRequest if method == "Release" else pb.CheckRequest
        return st.builds(
            cls, client_version=version, network=words, container_id=words, ifname=words
        )
    if method == "GarbageCollect":
        return st.builds(
            pb.GarbageCollectRequest,
            client_version=version,
            network=words,
            valid=st.lists(
                st.builds(pb.Attachment, container_id=words, ifname=words), max_size=3
            ),
        )
    if method == "ApplyPools":
        return st.builds(
            pb.ApplyPoolsRequest,
            client_version=version,
            manifest=st.one_of(st.just(""), manifest_text),
            pools=st.lists(pool_message(), max_size=2),
            reserved=st.lists(
                st.builds(
                    pb.ReservedIP,
                    name=words,
                    ip_version=st.integers(-(2**31), 2**31 - 1),
                    ips=st.lists(entry, max_size=3),
                ),
                max_size=2,
            ),
            dry_run=st.booleans(),
        )
    if method in ("GetPool", "DeletePool"):
        if method == "GetPool":
            return st.builds(pb.GetPoolRequest, client_version=version, name=words)
        return st.builds(
            pb.DeletePoolRequest,
            client_version=version,
            name=words,
            kind=st.sampled_from(["", "SpiderIPPool", "SpiderReservedIP", "Pod"]),
        )
    if method == "ListAllocations":
        return st.builds(
            pb.ListAllocationsRequest,
            client_version=version,
            network=words,
            pool=words,
            container_id=words,
        )
    if method == "ReleaseAllocation":
        return st.builds(
            pb.ReleaseAllocationRequest,
            client_version=version,
            container_id=words,
            ifname=words,
            pool=words,
            ip=entry,
        )
    request_class = {"Status": pb.StatusRequest, "ListPools": pb.ListPoolsRequest}
    return st.builds(request_class[method], client_version=version)


any_request = st.sampled_from(METHODS).flatmap(
    lambda m: st.tuples(st.just(m), request_for(m))
)

# -- the daemon under test ----------------------------------------------------


class Alarms(logging.Handler):
    """Records what must never be logged: a traceback, or anything at ERROR."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(f"{record.name}: {record.getMessage()}")


@pytest.fixture(scope="module")
def daemon() -> Iterator[tuple[Daemon, Path, Alarms]]:
    work = Path(tempfile.mkdtemp(prefix="ra-fuzz-"))
    alarms = Alarms()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)  # a traceback logged at INFO counts too
    root.addHandler(alarms)
    d = build(Settings(db_url="memory", listen=str(work / "ipamd.sock")))
    try:
        yield d, work, alarms
    finally:
        d.stop(grace=None)
        root.removeHandler(alarms)
        root.setLevel(level)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def channel(daemon: tuple[Daemon, Path, Alarms]) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(daemon[0].address) as ch:
        yield ch


def assert_quiet(alarms: Alarms) -> None:
    found, alarms.records[:] = list(alarms.records), []
    assert found == [], found


RESULT_LINE = re.compile(
    r"(SpiderIPPool|SpiderReservedIP)/\S+ (created|configured|unchanged)( \(dry run\))?"
)

# -- the CLI door ---------------------------------------------------------------


@FUZZ
@given(content=manifest_bytes, dry_run=st.booleans())
def test_pool_apply_answers_every_file_cleanly(daemon, content, dry_run) -> None:
    d, work, alarms = daemon
    path = work / "pools.yaml"
    path.write_bytes(content)
    args = ["pool", "apply", "-f", str(path), "--socket", str(d.socket)]
    res = CliRunner().invoke(main, args + (["--dry-run"] if dry_run else []))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output
    assert res.exit_code in (0, 1), res.output
    if res.exit_code == 0:
        lines = res.output.splitlines()
        assert lines and all(RESULT_LINE.fullmatch(line) for line in lines), lines
    else:
        assert res.output.startswith("Error: ") and res.output.count("\n") == 1
        assert "UNKNOWN" not in res.output and "INTERNAL" not in res.output
    assert_quiet(alarms)


@FUZZ
@given(text=manifest_text)
def test_the_manifest_parser_raises_only_pool_errors(text) -> None:
    try:
        pools, reserved = parse_manifest(text)
    except PoolError as exc:
        assert str(exc) and len(str(exc)) < 2000
    else:
        assert pools or reserved


# -- the gRPC door --------------------------------------------------------------


@FUZZ
@given(call=any_request)
def test_every_rpc_answers_structured_requests_cleanly(daemon, channel, call) -> None:
    method, request = call
    rpc = channel.unary_unary(
        f"/ipamd.api.v1.Ipam/{method}",
        request_serializer=lambda m: m.SerializeToString(),
    )
    try:
        rpc(request, timeout=30)
    except grpc.RpcError as err:
        assert err.code() in REFUSALS, (err.code(), err.details())
        assert err.details() and len(err.details()) < 2000
    assert_quiet(daemon[2])


@FUZZ
@given(method=st.sampled_from(METHODS), raw=st.binary(max_size=300))
def test_every_rpc_answers_undecodable_bytes_cleanly(
    daemon, channel, method, raw
) -> None:
    rpc = channel.unary_unary(f"/ipamd.api.v1.Ipam/{method}")
    try:
        rpc(raw, timeout=30)
    except grpc.RpcError as err:
        assert err.code() in REFUSALS, (err.code(), err.details())
    assert_quiet(daemon[2])
