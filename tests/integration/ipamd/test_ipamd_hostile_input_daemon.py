# SPDX-License-Identifier: Apache-2.0
"""What a careless operator feeds ``ipamd pool apply``, row by row: the tests that
send hostile input to an ipamd serving on a unix socket.

The rest of them, in-process, are in tests/unit/ipamd/test_ipamd_hostile_input.py (the
unit tier).
"""

from __future__ import annotations

import codecs
import logging
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner, Result

from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION
from ipamd.cli import explain, main
from ipamd.client import IpamdCallError, IpamdClient
from ipamd.manifest import MAX_NESTING
from ipamd.pools import MAX_LIST_ENTRIES
from ipamd.server import Daemon
from tests.unit.ipamd.test_ipamd_hostile_input import DEEP, one_line_error

pytestmark = pytest.mark.integration


HEAD = """apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata:
  name: {name}
"""


def pool_yaml(name: str = "rail1", **spec: str) -> str:
    fields = {"subnet": "172.16.11.0/24", "ips": "[172.16.11.1-172.16.11.200]"}
    fields.update(spec)
    body = "".join(f"  {k}: {v}\n" for k, v in fields.items())
    return HEAD.format(name=name) + "spec:\n" + body


@pytest.fixture
def apply(socket_path: str, tmp_path: Path):
    def run(content: bytes | str, *extra: str, name: str = "pools.yaml") -> Result:
        path = tmp_path / name
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        return CliRunner().invoke(
            main, ["pool", "apply", "-f", str(path), "--socket", socket_path, *extra]
        )

    return run


def grpc_apply(daemon: Daemon, manifest: str) -> IpamdCallError:
    with IpamdClient(daemon.address, timeout=10) as c:
        with pytest.raises(IpamdCallError) as err:
            c.call(
                "ApplyPools",
                pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=manifest),
            )
    return err.value


def test_a_latin1_pool_file_is_refused_naming_the_file_and_byte(apply, tmp_path):
    text = pool_yaml() + "  # Réseau GPU\n"
    out = one_line_error(apply(text.encode("latin-1"), name="latin.yaml"))
    assert f"{tmp_path / 'latin.yaml'} is not UTF-8: byte 0xe9 on line 8" in out
    assert "iconv -f LATIN1 -t UTF-8" in out


@pytest.mark.parametrize(
    "content",
    [
        pool_yaml().encode("utf-16"),  # the platform's order, with its BOM
        codecs.BOM_UTF16_BE + pool_yaml().encode("utf-16-be"),
    ],
    ids=["le", "be"],
)
def test_a_utf16_pool_file_with_a_bom_is_refused_naming_the_encoding(
    apply, tmp_path, content
):
    out = one_line_error(apply(content, name="u16.yaml"))
    assert f"{tmp_path / 'u16.yaml'} is UTF-16" in out


def test_a_utf16_pool_file_without_a_bom_is_refused_for_its_nul_bytes(apply):
    out = one_line_error(apply(pool_yaml().encode("utf-16-le")))
    assert "holds NUL bytes" in out and "UTF-16" in out


def test_a_utf8_pool_file_with_a_bom_is_read(apply):
    res = apply(pool_yaml().encode("utf-8-sig"))
    assert res.exit_code == 0, res.output
    assert "SpiderIPPool/rail1 created" in res.output


@pytest.mark.parametrize(
    "manifest",
    [DEEP, "- " * 5000 + "x\n", "".join("  " * i + "k:\n" for i in range(1000))],
    ids=["flow", "block-list", "block-map"],
)
def test_deep_nesting_sent_directly_is_invalid_argument(daemon, manifest) -> None:
    err = grpc_apply(daemon, manifest)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"nests deeper than {MAX_NESTING} levels" in err.details


def test_a_5000_digit_ipversion_names_the_field(apply, daemon) -> None:
    manifest = pool_yaml(ipVersion="9" * 5000)
    out = one_line_error(apply(manifest))
    assert "'spec.ipVersion' <a 5000-digit number>: must be the integer 4 or 6" in out
    assert len(out) < 300
    err = grpc_apply(daemon, manifest)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "'spec.ipVersion'" in err.details


@pytest.mark.parametrize("value", ['"4"', "0", "IPv4", "4.0", "true"])
def test_ipversion_follows_spiderpool_types(apply, value) -> None:
    out = one_line_error(apply(pool_yaml(ipVersion=value)))
    assert "INVALID_ARGUMENT: SpiderIPPool rail1: invalid 'spec.ipVersion'" in out


def test_ipversion_absent_is_derived_from_the_subnet(apply, socket_path) -> None:
    assert apply(pool_yaml()).exit_code == 0
    res = CliRunner().invoke(
        main, ["pool", "get", "rail1", "--json", "--socket", socket_path]
    )
    assert '"ipVersion": 4' in res.output


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"subnet": "ff02::/16", "ips": "[ff02::1-ff02::ff]"}, "multicast block"),
        ({"subnet": "224.0.0.0/4", "ips": "[224.0.0.1]"}, "multicast block"),
        ({"subnet": "192.0.0.0/2", "ips": "[224.0.0.1-224.0.0.9]"}, "is multicast"),
        ({"ips": "['fe80::1%eth0']", "subnet": "fe80::/64"}, "has a zone"),
        ({"subnet": "fe80::%eth0/64", "ips": "['fe80::1']"}, "zone"),
        ({"gateway": "'172.16.11.254%eth0'"}, "has a zone"),
        ({"excludeIPs": "['172.16.11.9%1']"}, "has a zone"),
        (
            {"subnet": "192.0.0.0/2", "ips": "[192.0.0.1]", "gateway": "224.0.0.1"},
            "gateway' 224.0.0.1 is multicast",
        ),
    ],
)
def test_multicast_pools_and_zoned_addresses_are_refused(apply, spec, reason):
    out = one_line_error(apply(pool_yaml(**spec)))
    assert "INVALID_ARGUMENT" in out and reason in out


def test_a_zoned_reserved_ip_is_refused(apply) -> None:
    doc = (
        "apiVersion: spiderpool.spidernet.io/v2beta1\nkind: SpiderReservedIP\n"
        "metadata: {name: r}\nspec: {ips: ['fe80::1%eth0']}\n"
    )
    assert "has a zone" in one_line_error(apply(doc))


def exclude_list(count: int) -> str:
    # count distinct addresses of 10.0.0.0/8, written one per entry.
    return (
        "["
        + ",".join(
            f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(1, count + 1)
        )
        + "]"
    )


def big_pool(count: int) -> str:
    return pool_yaml(
        subnet="10.0.0.0/8",
        ips="[10.0.0.1-10.255.255.254]",
        excludeIPs=exclude_list(count),
    )


def test_excludeips_over_the_limit_are_refused_with_the_limit(apply) -> None:
    out = one_line_error(apply(big_pool(MAX_LIST_ENTRIES + 1)))
    assert f"'spec.excludeIPs' has {MAX_LIST_ENTRIES + 1} entries, at most " in out
    assert f"{MAX_LIST_ENTRIES} are accepted" in out and "'first-last'" in out


def test_excludeips_at_the_limit_are_accepted_and_deleted(apply, socket_path):
    res = apply(big_pool(MAX_LIST_ENTRIES))
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["pool", "delete", "rail1", "--socket", socket_path])
    assert res.exit_code == 0, res.output


def test_a_file_over_the_message_limit_is_refused_in_operator_words(apply, tmp_path):
    # 1,000,000 excludeIPs, about 14 MB: over gRPC's 4 MiB message limit.
    path = tmp_path / "huge.yaml"
    with path.open("w") as f:
        f.write(pool_yaml(subnet="10.0.0.0/8", ips="[10.0.0.1-10.255.255.254]"))
        f.write("  excludeIPs:\n")
        for i in range(1, 1_000_001):
            f.write(f"    - 10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}\n")
    res = CliRunner().invoke(main, ["pool", "apply", "-f", str(path)])
    out = one_line_error(res)
    assert f"{path} is larger than ipamd accepts in one apply (4 MiB)" in out
    assert "one range 'first-last'" in out


def test_the_servers_size_refusal_is_explained_the_same_way(daemon) -> None:
    err = grpc_apply(daemon, "x" * (5 * 2**20))
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    text = explain(err)
    assert text.startswith("the request is larger than ipamd accepts (4 MiB)")
    assert "'first-last'" in text


def test_pool_churn_returns_the_memory_it_took(daemon, caplog) -> None:
    # The daemon's Python heap after apply/delete cycles of a pool with many
    # excludeIPs: what a cycle allocates is freed by its delete. (RSS over
    # 1,000 cycles of the largest accepted pool: benchmarks/bench_pool_churn.py.)
    import tracemalloc

    # Records kept by pytest's log capture would hold what the daemon freed.
    caplog.set_level(logging.WARNING)
    excluded = [f"10.0.{i >> 8}.{i & 255}" for i in range(2, 2002, 2)]
    pool = pb.Pool(
        name="churn",
        subnet="10.0.0.0/8",
        ips=["10.0.0.1-10.255.255.254"],
        exclude_ips=excluded,
    )
    apply = pb.ApplyPoolsRequest(client_version=API_VERSION, pools=[pool])
    delete = pb.DeletePoolRequest(client_version=API_VERSION, name="churn")
    with IpamdClient(daemon.address, timeout=30) as c:

        def cycles(n: int) -> None:
            for _ in range(n):
                c.call("ApplyPools", apply)
                c.call("DeletePool", delete)

        tracemalloc.start()
        try:
            cycles(3)  # first-use caches (protobuf, gRPC, logging) settle
            before = tracemalloc.take_snapshot()
            cycles(20)
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
    # The test code's own allocations are no part of the daemon's heap (nor
    # are those of a thread some other test might have left running).
    not_tests = [tracemalloc.Filter(False, "*/tests/*")]
    growth = after.filter_traces(not_tests).compare_to(
        before.filter_traces(not_tests), "filename"
    )
    grown = sum(stat.size_diff for stat in growth)
    assert grown < 256 * 1024, [str(s) for s in growth[:5]]
