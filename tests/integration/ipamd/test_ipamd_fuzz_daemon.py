# SPDX-License-Identifier: Apache-2.0
"""Fuzzing ipamd's two doors: ``ipamd pool apply`` and the gRPC API: the tests that
fuzz the CLI and the gRPC API of an ipamd serving on a unix socket.

The rest of them, in-process, are in tests/unit/ipamd/test_ipamd_fuzz.py (the unit
tier).
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION
from ipamd.cli import main
from ipamd.server import Daemon, build
from ipamd.settings import Settings
from tests.unit.ipamd.test_ipamd_fuzz import (
    FUZZ,
    HOSTILE,
    address,
    entry,
    manifest_text,
    name,
    subnet,
)

pytestmark = pytest.mark.integration


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
