# SPDX-License-Identifier: Apache-2.0
"""Issue 10's table: hostile ADD inputs to the real ``sriov`` binary, then DEL.

Each row is an ADD that is otherwise valid, run black box on the simulated
host with a real ipamd, followed by the runtime's DEL with the same
environment. Every row must end in exactly one CNI error document on stdout
(or, for the output-failure row, a rolled-back ADD), no traceback on stderr,
and nothing left behind: the VF home under its name, no record or temp file
in the state dir, no allocation in ipamd.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from railyard_sim import daemon
from railyard_sim.lab import Lab
from railyard_sim.runtime import plugin_bin_dir
from tests.doubles.lab_ipamd import lab_with_ipamd
from tests.doubles.sriov_lab import link, pod_links

pytestmark = pytest.mark.integration

#: Per-ADD deadline for the rows that could block (a FIFO netns, a socket that
#: never answers): short, so a hang shows as a failure in seconds.
DEADLINE = "6"


@dataclass
class Row:
    """One row: how it changes the env and the netconf of a valid ADD."""

    env: dict[bytes, bytes] = field(default_factory=dict)
    conf: dict[str, Any] = field(default_factory=dict)
    ipam: dict[str, Any] = field(default_factory=dict)
    codes: tuple[int, ...] = ()
    prepare: Callable[[Path], dict[str, Any]] | None = None


@dataclass
class Env:
    lab: Lab
    state_dir: Path
    base_env: dict[bytes, bytes]
    pod: str


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab_with_ipamd(
        tmp_path_factory.mktemp("hostile"), rails=1, vfs_per_pf=2
    ) as lab:
        yield lab


@pytest.fixture
def env(lab: Lab, tmp_path: Path) -> Iterator[Env]:
    name = lab.netns_name(f"h{os.urandom(3).hex()}")
    subprocess.run(["ip", "netns", "add", name], check=True)
    state_dir = tmp_path / "state"
    base = {
        **{k.encode(): v.encode() for k, v in daemon.client_env(lab.dir).items()},
        b"RAILYARD_STATE_DIR": str(state_dir).encode(),
        b"RAILYARD_NODE_NAME": b"node1",
        b"RAILYARD_DEADLINE": DEADLINE.encode(),
        b"RAILYARD_DEADLINE_GRACE": b"2",
        b"PATH": os.environ.get("PATH", "/usr/bin:/bin").encode(),
        b"CNI_PATH": str(plugin_bin_dir(lab.dir)).encode(),
        b"CNI_CONTAINERID": b"chostile",
        b"CNI_NETNS": f"/var/run/netns/{name}".encode(),
        b"CNI_IFNAME": b"net1",
    }
    try:
        yield Env(lab, state_dir, base, f"/var/run/netns/{name}")
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def conf_for(lab: Lab, **extra: Any) -> dict[str, Any]:
    r = lab.rail(1)
    ipam = {"type": "railyard", "default_ipv4_ippool": [r.pool_v4]}
    ipam.update(extra.pop("ipam", {}))
    out = {
        "cniVersion": "1.0.0",
        "name": "hostile",
        "type": "sriov",
        "deviceID": r.vfs[0].pci,
        "ipam": ipam,
    }
    out.update(extra)
    return out


@dataclass
class Run:
    code: int
    stdout: bytes
    stderr: bytes
    seconds: float

    def doc(self) -> dict[str, Any]:
        """The one JSON document on stdout (fails the test if there is not)."""
        text = self.stdout.decode()
        obj, end = json.JSONDecoder().raw_decode(text.lstrip())
        assert text.lstrip()[end:].strip() == "", f"more than one document: {text!r}"
        assert isinstance(obj, dict)
        return obj


def run(
    lab: Lab,
    command: str,
    env: dict[bytes, bytes],
    conf: dict[str, Any] | bytes,
    stdout: int | None = subprocess.PIPE,
) -> Run:
    binary = plugin_bin_dir(lab.dir) / "sriov"
    data = conf if isinstance(conf, bytes) else json.dumps(conf).encode()
    start = time.monotonic()
    proc = subprocess.run(
        [str(binary)],
        input=data,
        env={**env, b"CNI_COMMAND": command.encode()},
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=30,
        check=False,
    )
    return Run(
        proc.returncode, proc.stdout or b"", proc.stderr, time.monotonic() - start
    )


def assert_clean_error(r: Run, codes: tuple[int, ...] = ()) -> dict[str, Any]:
    assert b"Traceback" not in r.stderr, r.stderr.decode(errors="replace")
    assert r.code == 1, (r.code, r.stdout, r.stderr)
    doc = r.doc()
    assert isinstance(doc.get("code"), int) and doc["code"] != 999, doc
    assert isinstance(doc.get("msg"), str) and doc["msg"], doc
    if codes:
        assert doc["code"] in codes, doc
    return doc


def allocations(lab: Lab) -> list[Any]:
    out = subprocess.run(
        [daemon.ipamd_command(), "alloc", "list", "--json"],
        env={**os.environ, **daemon.client_env(lab.dir)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def assert_nothing_left(e: Env) -> None:
    vf = e.lab.rail(1).vfs[0]
    assert link(vf.netdev) is not None, f"VF {vf.netdev} is not home"
    assert pod_links(e.pod) == ["lo"]
    left = (
        sorted(
            str(p.relative_to(e.state_dir))
            for p in e.state_dir.rglob("*")
            if p.is_file() and "locks" not in p.relative_to(e.state_dir).parts
        )
        if e.state_dir.exists()
        else []
    )
    assert left == [], left
    assert allocations(e.lab) == []


def add_then_del(e: Env, env: dict[bytes, bytes], conf: dict[str, Any]) -> Run:
    """ADD (must fail cleanly), then the runtime's DEL with the same input."""
    add = run(e.lab, "ADD", env, conf)
    delete = run(e.lab, "DEL", env, conf)
    assert b"Traceback" not in delete.stderr, delete.stderr.decode(errors="replace")
    if delete.code != 0:
        assert_clean_error(delete)
    return add


def _fifo(tmp: Path) -> dict[str, Any]:
    path = tmp / "fifo"
    os.mkfifo(path)
    return {"env": {b"CNI_NETNS": str(path).encode()}}


def _plain_file(tmp: Path) -> dict[str, Any]:
    path = tmp / "plain"
    path.write_text("x")
    return {"ipam": {"socket": str(path)}}


def _dir_socket(tmp: Path) -> dict[str, Any]:
    return {"ipam": {"socket": str(tmp)}}


def _dead_socket(tmp: Path) -> dict[str, Any]:
    import socket

    path = tmp / "dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # a socket file nobody listens on: connection refused
    return {"ipam": {"socket": str(path)}}


ROWS: dict[str, Row] = {
    "ifname-percent-d": Row(env={b"CNI_IFNAME": b"%d"}, codes=(4,)),
    "ifname-percent-in-name": Row(env={b"CNI_IFNAME": b"net%d"}, codes=(4,)),
    "netns-fifo": Row(prepare=_fifo, codes=(4, 104)),
    "container-id-long": Row(env={b"CNI_CONTAINERID": b"c" * 600}, codes=(4,)),
    "netns-non-utf8": Row(env={b"CNI_NETNS": b"/var/run/netns/\xff\xfe"}, codes=(4,)),
    "ifname-non-utf8": Row(env={b"CNI_IFNAME": b"n\xff"}, codes=(4,)),
    "containerid-non-utf8": Row(env={b"CNI_CONTAINERID": b"c\xff"}, codes=(4,)),
    "ipamd-unreachable": Row(prepare=_dead_socket, codes=(11, 101)),
    "ipam-socket-plain-file": Row(prepare=_plain_file, codes=(7, 101, 11)),
    "ipam-socket-dir": Row(prepare=_dir_socket, codes=(7, 101, 11)),
    "ipam-socket-wrong-type": Row(ipam={"socket": 42}, codes=(7,)),
    "ipam-timeout-nan": Row(ipam={"timeout": float("nan")}, codes=(6, 7)),
    "ipam-timeout-inf": Row(ipam={"timeout": float("inf")}, codes=(6, 7)),
    "ipam-timeout-huge": Row(ipam={"timeout": 2**64}, codes=(7,)),
    "ipam-timeout-negative": Row(ipam={"timeout": -1}, codes=(7,)),
    "ipam-timeout-bool": Row(ipam={"timeout": True}, codes=(7,)),
    "ipam-type-relative-path": Row(ipam={"type": "../../../bin/true"}, codes=(7,)),
    "ipam-type-absolute-path": Row(ipam={"type": "/bin/true"}, codes=(7,)),
    "ipam-type-dhcp-missing": Row(ipam={"type": "dhcp"}, codes=(7, 101)),
    "ipam-type-unknown": Row(ipam={"type": "no-such-ipam"}, codes=(7, 101)),
    "network-name-10mb": Row(conf={"name": "n" * (10 * 1024 * 1024)}, codes=(7,)),
}


@pytest.mark.parametrize("row", list(ROWS), ids=list(ROWS))
def test_hostile_add_answers_one_error_and_leaves_nothing(
    env: Env, tmp_path: Path, row: str
) -> None:
    spec = ROWS[row]
    extra = spec.prepare(tmp_path) if spec.prepare else {}
    penv = {**env.base_env, **spec.env, **extra.get("env", {})}
    conf = conf_for(env.lab, ipam={**spec.ipam, **extra.get("ipam", {})}, **spec.conf)
    add = add_then_del(env, penv, conf)
    assert_clean_error(add, spec.codes)
    assert add.seconds < float(DEADLINE) + 3, add.seconds
    assert_nothing_left(env)


def test_log_file_dev_full_still_answers_one_document(env: Env) -> None:
    """A log that cannot be written must not corrupt stdout or fail ADD."""
    conf = conf_for(env.lab, logFile="/dev/full", logLevel="debug")
    add = run(env.lab, "ADD", env.base_env, conf)
    assert b"Traceback" not in add.stderr, add.stderr.decode(errors="replace")
    doc = add.doc()
    if add.code == 0:
        assert doc["interfaces"][0]["name"] == "net1", doc
        assert pod_links(env.pod) != ["lo"]
    else:
        assert_clean_error(add)
    delete = run(env.lab, "DEL", env.base_env, conf)
    assert delete.code == 0, (delete.stdout, delete.stderr)
    assert b"Traceback" not in delete.stderr
    assert_nothing_left(env)


def test_add_whose_result_cannot_be_written_is_rolled_back(env: Env) -> None:
    """stdout on a full device: the runtime never learns of the attachment, so
    ADD must undo it rather than leave a VF and an address nobody will DEL."""
    conf = conf_for(env.lab)
    with open("/dev/full", "wb") as full:
        add = run(env.lab, "ADD", env.base_env, conf, stdout=full.fileno())
    assert add.code != 0
    assert b"Traceback" not in add.stderr, add.stderr.decode(errors="replace")
    assert_nothing_left(env)


def test_add_with_stdout_closed_is_rolled_back(env: Env) -> None:
    binary = plugin_bin_dir(env.lab.dir) / "sriov"
    proc = subprocess.Popen(
        [str(binary)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**env.base_env, b"CNI_COMMAND": b"ADD"},
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone: writing the result raises EPIPE
    _, err = proc.communicate(json.dumps(conf_for(env.lab)).encode(), timeout=30)
    assert proc.returncode != 0
    assert b"Traceback" not in err, err.decode(errors="replace")
    assert_nothing_left(env)
