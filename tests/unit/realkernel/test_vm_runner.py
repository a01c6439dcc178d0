# SPDX-License-Identifier: Apache-2.0
"""The real-kernel tier's VM runner: its initramfs archive and QEMU command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realkernel import vm


def read_newc(archive: bytes) -> list[tuple[str, int, bytes]]:
    """(name, mode, data) of each entry of a newc cpio archive, trailer included."""
    out, pos = [], 0
    while pos < len(archive):
        assert archive[pos : pos + 6] == b"070701"
        fields = [
            int(archive[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)
        ]
        mode, size, namesize = fields[1], fields[6], fields[11]
        pos += 110
        name = archive[pos : pos + namesize - 1].decode()
        pos += namesize + (-(pos + namesize) % 4)
        out.append((name, mode, archive[pos : pos + size]))
        pos += size + (-(pos + size) % 4)
        if name == "TRAILER!!!":
            break
    assert pos == len(archive)
    return out


def test_the_initramfs_archive_holds_every_entry_aligned() -> None:
    entries = [
        ("bin", 0o40755, b""),
        ("init", 0o100755, b"#!/bin/busybox sh\n"),
        ("x.ko", 0o100644, b"abc"),
    ]
    assert read_newc(vm._cpio_newc(entries)) == [*entries, ("TRAILER!!!", 0, b"")]


@pytest.fixture
def argv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(vm, "initramfs", lambda release: tmp_path / "initrd")

    def build(accel: str) -> list[str]:
        return vm._qemu_argv(
            "6.1.0-9-amd64", accel, tmp_path / "ctl", [Path("/work/x")], 2048, 2
        )

    return build


def test_tcg_shares_the_root_read_only_and_work_dirs_read_write(argv) -> None:  # type: ignore[no-untyped-def]
    line = argv("tcg")
    assert line[line.index("-accel") + 1] == "tcg,thread=multi"
    assert "-no-reboot" in line  # the guest's power-off ends QEMU
    shares = [line[i + 1] for i, word in enumerate(line) if word == "-virtfs"]
    assert shares[0].startswith("local,path=/,mount_tag=root,") and shares[0].endswith(
        ",readonly=on"
    )
    assert "mount_tag=control" in shares[1] and "readonly" not in shares[1]
    assert "path=/work/x,mount_tag=share0" in shares[2] and "readonly" not in shares[2]
    assert line[line.index("-kernel") + 1] == "/boot/vmlinuz-6.1.0-9-amd64"


def test_kvm_is_asked_for_only_when_chosen(argv) -> None:  # type: ignore[no-untyped-def]
    line = argv("kvm")
    assert line[line.index("-accel") + 1] == "kvm"


def test_the_accelerator_can_be_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAILYARD_VM_ACCEL", "tcg")
    assert vm.choose_accel("6.1.0-9-amd64") == "tcg"
