# SPDX-License-Identifier: Apache-2.0
"""``ipamd db dump`` / ``ipamd db load``: moving a database between stores."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ipamd import pool_admin
from ipamd.allocator import AllocateRequest, AllocState
from ipamd.cli import main
from ipamd.manifest import parse_manifest
from ipamd.store import Snapshot
from ipamd.store.sql import SqlStore

RESERVED = """
---
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderReservedIP
metadata: {name: keep-out}
spec: {ipVersion: 4, ips: [172.16.11.1-172.16.11.3]}
"""


def fill(url: str, rails_yaml: str) -> Snapshot:
    """Pools, a reserved range, allocations and a held sticky address."""
    store = SqlStore(url)
    try:
        state = AllocState(store.load())
        pools, reserved = parse_manifest(rails_yaml + RESERVED)
        store.apply(pool_admin.apply_pools(state, pools, reserved)[1])
        for n in range(3):
            req = AllocateRequest(
                network="rail1",
                container_id=f"c{n}",
                ifname="net1",
                ipv4_pools=("gpu1-net11",),
                ipv6_pools=("gpu1-v6",),
                pod_namespace="ns",
                pod_name=f"p{n}",
                sticky=n == 2,
            )
            store.apply(state.allocate(req)[1])
        store.apply(state.release("rail1", "c2", "net1")[1])
        return store.load()
    finally:
        store.close()


def snapshot(url: str) -> Snapshot:
    store = SqlStore(url)
    try:
        return store.load()
    finally:
        store.close()


def same(a: Snapshot, b: Snapshot) -> bool:
    def key(s: Snapshot) -> object:
        return (
            s.pools,
            s.reserved,
            sorted(s.allocations, key=lambda r: (r.pool, r.ip)),
        )

    return key(a) == key(b)


def move(src: str, dst: str, tmp: Path) -> None:
    runner = CliRunner()
    out = tmp / f"dump-{len(list(tmp.iterdir()))}.json"
    res = runner.invoke(main, ["db", "dump", "--db", src, "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["format"] == "railyard-ipamd-dump/v1"
    res = runner.invoke(main, ["db", "load", "--db", dst, str(out)])
    assert res.exit_code == 0, res.output


def test_sqlite_to_sqlite_keeps_everything(tmp_path: Path, rails_yaml: str) -> None:
    src, dst = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    original = fill(src, rails_yaml)
    assert len(original.allocations) == 6 and original.reserved
    move(src, dst, tmp_path)
    assert same(snapshot(dst), original)


def test_load_refuses_a_database_that_is_not_empty(
    tmp_path: Path, rails_yaml: str
) -> None:
    src = f"sqlite:///{tmp_path / 'a.db'}"
    fill(src, rails_yaml)
    dump = tmp_path / "d.json"
    runner = CliRunner()
    assert (
        runner.invoke(main, ["db", "dump", "--db", src, "-o", str(dump)]).exit_code == 0
    )
    res = runner.invoke(main, ["db", "load", "--db", src, str(dump)])
    assert res.exit_code == 1
    assert "is not empty" in res.output
    # and the refused load left the lease free for the daemon
    assert SqlStore(src).read_lease().remaining <= 0


def test_load_refuses_while_a_daemon_is_active(tmp_path: Path, rails_yaml: str) -> None:
    src, dst = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    fill(src, rails_yaml)
    dump = tmp_path / "d.json"
    runner = CliRunner()
    assert (
        runner.invoke(main, ["db", "dump", "--db", src, "-o", str(dump)]).exit_code == 0
    )
    active = SqlStore(dst)
    try:
        active.acquire_lease("node1/42", 30.0)
        res = runner.invoke(main, ["db", "load", "--db", dst, str(dump)])
    finally:
        active.close()
    assert res.exit_code == 1
    assert "ipamd node1/42 is active" in res.output


def test_load_refuses_a_file_that_is_not_a_dump(
    tmp_path: Path, rails_yaml: str
) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"pools": {}}')
    res = CliRunner().invoke(
        main, ["db", "load", "--db", f"sqlite:///{tmp_path / 'b.db'}", str(bad)]
    )
    assert res.exit_code == 1
    assert "not an ipamd dump" in res.output
