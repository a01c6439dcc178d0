# SPDX-License-Identifier: Apache-2.0
"""cni.state.cache: atomic 0600 records, load/delete/list for DEL and GC."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from cni.errors import CniError
from cni.state.cache import StateCache


@pytest.fixture
def cache(tmp_path: Path) -> StateCache:
    return StateCache(tmp_path / "state", "sriov")


ORIG = {
    "pci": "0000:3b:02.1",
    "origName": "enp59s0f0v1",
    "origMac": "02:00:00:00:00:01",
}


def test_record_lives_at_plugin_container_ifname_path(cache, tmp_path):
    path = cache.save("3f2a8c", "net1", ORIG, network="rail1")
    assert path == tmp_path / "state" / "sriov" / "3f2a8c-net1.json"


def test_saved_record_loads_back_with_bookkeeping_keys(cache):
    cache.save("3f2a8c", "net1", ORIG, network="rail1")
    data = cache.load("3f2a8c", "net1")
    assert data == ORIG | {
        "containerID": "3f2a8c",
        "ifname": "net1",
        "network": "rail1",
        "plugin": "sriov",
    }


def test_files_are_0600_and_the_directory_0700(cache):
    old = os.umask(0o022)
    try:
        path = cache.save("c1", "net1", ORIG)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.dir.stat().st_mode) == 0o700


def test_existing_directory_is_tightened_to_0700(cache):
    cache.dir.mkdir(parents=True, mode=0o755)
    os.chmod(cache.dir, 0o755)
    cache.save("c1", "net1", ORIG)
    assert stat.S_IMODE(cache.dir.stat().st_mode) == 0o700


def test_overwrite_replaces_the_whole_record_and_leaves_no_temp_files(cache):
    cache.save("c1", "net1", {"a": 1, "b": 2})
    cache.save("c1", "net1", {"a": 3})
    assert cache.load("c1", "net1")["a"] == 3
    assert "b" not in cache.load("c1", "net1")
    assert sorted(os.listdir(cache.dir)) == ["c1-net1.json"]


def test_a_new_record_is_durable_a_replacement_skips_the_directory_fsync(
    cache, monkeypatch
):
    """A new record: its data, then its name in the directory, on disk. A
    replacement: its data on disk before the rename, so a power loss leaves
    the old version or the new one, both whole; not the directory again."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        synced.append("dir" if is_dir else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    cache.save("c1", "net1", {"stage": "saved"})
    assert synced == ["file", "dir"]
    synced.clear()
    cache.save("c1", "net1", {"stage": "attached"})
    assert synced == ["file"]
    assert cache.load("c1", "net1")["stage"] == "attached"
    cache.delete("c1", "net1")
    synced.clear()
    cache.save("c1", "net1", {"stage": "saved"})  # new again after a DEL
    assert synced == ["file", "dir"]


def test_failed_write_keeps_the_old_record_and_cleans_its_temp_file(cache):
    cache.save("c1", "net1", {"a": 1})
    with pytest.raises(TypeError):
        cache.save("c1", "net1", {"unserialisable": object()})
    assert cache.load("c1", "net1")["a"] == 1
    assert os.listdir(cache.dir) == ["c1-net1.json"]


def test_load_of_a_missing_record_is_none(cache):
    assert cache.load("nope", "net1") is None


def test_corrupt_record_is_reported_not_ignored(cache):
    cache.dir.mkdir(parents=True)
    (cache.dir / "c1-net1.json").write_text('{"truncated": ')
    with pytest.raises(CniError) as e:
        cache.load("c1", "net1")
    assert e.value.code == 5
    assert "c1-net1.json" in e.value.details


def test_delete_is_idempotent(cache):
    cache.save("c1", "net1", ORIG)
    assert cache.exists("c1", "net1")
    assert cache.delete("c1", "net1") is True
    assert cache.delete("c1", "net1") is False
    assert not cache.exists("c1", "net1")


def test_records_lists_every_attachment_for_gc_and_skips_junk(cache):
    cache.save("c1", "net1", ORIG, network="rail1")
    cache.save("c2", "net2", ORIG, network="rail2")
    (cache.dir / "broken.json").write_text("{")
    (cache.dir / "foreign.json").write_text(json.dumps({"x": 1}))
    (cache.dir / ".c3-net1.json.abc.tmp").write_text("{}")
    (cache.dir / "notes.txt").write_text("hi")
    recs = list(cache.records())
    assert [(r.container_id, r.ifname, r.network) for r in recs] == [
        ("c1", "net1", "rail1"),
        ("c2", "net2", "rail2"),
    ]
    assert recs[0].data["origMac"] == ORIG["origMac"]
    assert recs[0].path.name == "c1-net1.json"


def test_records_of_a_never_used_plugin_is_empty(tmp_path):
    assert list(StateCache(tmp_path, "rdma").records()) == []


@pytest.mark.parametrize(("cid", "ifname"), [("", "net1"), ("a/b", "net1"), ("c", "")])
def test_keys_that_could_escape_the_directory_are_refused(cache, cid, ifname):
    with pytest.raises(ValueError):
        cache.path(cid, ifname)


@pytest.mark.parametrize("plugin", ["", "a/b", ".."])
def test_invalid_plugin_names_are_refused(tmp_path, plugin):
    with pytest.raises(ValueError):
        StateCache(tmp_path, plugin)


def test_unwritable_state_dir_is_an_io_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CniError) as e:
        StateCache(blocker, "sriov").save("c1", "net1", ORIG)
    assert e.value.code == 5
