# SPDX-License-Identifier: Apache-2.0
"""The warm path end to end: rendered shims, a real agent process, direct mode.

The agent serves test plugins (``tests/doubles/agent_host.py``) so each case
pins the agent's behaviour, not a plugin's; the direct-mode cases run the real
``railyard-ipam`` entry in the venv.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from cni.agent.shim import render
from cni.skel import run_plugin
from tests.doubles import agent_host
from tests.doubles.procs import children, wait_gone

REPO = Path(__file__).resolve().parents[3]
ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "c0ffee",
    "CNI_NETNS": "/var/run/netns/agent-test",
    "CNI_IFNAME": "net1",
    "CNI_PATH": "/usr/lib/cni",
}
PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "net1", "sandbox": "/var/run/netns/agent-test"}],
    "ips": [{"address": "10.1.2.3/24", "interface": 0}],
}


@dataclass
class AgentProc:
    socket: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def start_agent(tmp: Path, *extra: str) -> AgentProc:
    sock = tmp / "run" / "agent.sock"
    tmp.mkdir(exist_ok=True)
    log = tmp / "agent.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.doubles.agent_host", "--socket", str(sock)]
            + list(extra),
            cwd=REPO,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    deadline = time.monotonic() + 20
    while not sock.exists():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "agent socket did not appear"
        time.sleep(0.02)
    return AgentProc(sock, proc, log)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProc]:
    running = start_agent(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def shim(tmp: Path, plugin: str, module: str = "cni.plugins.ipam.__main__") -> Path:
    path = tmp / plugin
    path.write_text(
        render(plugin, module, "main", sys.executable, "/nonexistent/agent.sock")
    )
    path.chmod(0o755)
    return path


def call(
    binary: Path,
    sock: Path | str,
    stdin: bytes,
    timeout: float = 30,
    **env: str,
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(binary)],
        input=stdin,
        env={**ENV, "RAILYARD_AGENT_SOCKET": str(sock), **env},
        capture_output=True,
        timeout=timeout,
    )


def conf(**extra: object) -> bytes:
    return json.dumps(
        {"cniVersion": "1.0.0", "name": "t", "type": "x", **extra}
    ).encode()


# ------------------------------------------------------------------ relay


def test_a_forwarded_add_prints_what_the_plugin_prints_in_process(
    agent: AgentProc, tmp_path: Path
):
    stdin = conf(prevResult=PREV)
    done = call(shim(tmp_path, "echo"), agent.socket, stdin)
    assert done.returncode == 0, done.stderr
    direct_out = io.StringIO()
    code = run_plugin(
        agent_host.table()["echo"].funcs,
        "test echo",
        env=ENV,
        stdin=io.BytesIO(stdin),
        stdout=direct_out,
        stderr=io.StringIO(),
    )
    assert (done.returncode, done.stdout.decode()) == (code, direct_out.getvalue())
    assert b"echo ADD for c0ffee" in done.stderr  # the plugin's log, relayed
    assert b"agent not used" not in done.stderr


def test_the_runtime_environment_reaches_the_plugin_and_errors_come_back(
    agent: AgentProc, tmp_path: Path
):
    done = call(
        shim(tmp_path, "echo"), agent.socket, conf(), CNI_COMMAND="DEL", PROBE="x=1 y"
    )
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert (doc["code"], doc["msg"], doc["details"]) == (7, "PROBE=x=1 y", "net1")


def test_version_is_answered_by_the_shim_without_reading_stdin(tmp_path: Path):
    binary = shim(tmp_path, "echo")
    proc = subprocess.Popen(
        [str(binary)],
        env={"CNI_COMMAND": "VERSION"},
        stdin=subprocess.PIPE,  # never written nor closed: a read would hang
        stdout=subprocess.PIPE,
    )
    try:
        out = proc.stdout.read()  # type: ignore[union-attr]
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    in_process = io.StringIO()
    run_plugin(
        agent_host.table()["echo"].funcs,
        "x",
        env={"CNI_COMMAND": "VERSION"},
        stdin=io.BytesIO(b""),
        stdout=in_process,
        stderr=io.StringIO(),
    )
    assert out.decode() == in_process.getvalue()


def test_the_shim_imports_nothing_beyond_the_standard_library(tmp_path: Path):
    # Run as installed (-I -S): a forwarded command must work with no
    # site-packages at all, and VERSION must load no module of ours.
    binary = shim(tmp_path, "echo")
    # The shim ends with posix._exit; here that raises instead, so the
    # harness lives on to list what was imported.
    code = (
        "import sys, posix; sys.argv=[sys.argv[1]]; before = set(sys.modules)"
        "\ndef _exit(status): raise SystemExit(status)"
        "\nposix._exit = _exit"
        "\nsrc = open(sys.argv[0]).read()"
        "\ntry: exec(compile(src, sys.argv[0], 'exec'), {'__name__': '__main__'})"
        "\nexcept SystemExit: pass"
        "\nprint(sorted(set(sys.modules) - before), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(binary)],
        env={"CNI_COMMAND": "VERSION"},
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stderr.decode().strip().splitlines()[-1]
    assert set(ast.literal_eval(loaded)) <= {"__future__", "_socket", "posix"}, loaded


# ------------------------------------------------------- concurrency, faults


def test_requests_run_in_parallel_up_to_the_bound(tmp_path: Path):
    binary = shim(tmp_path, "sleep")

    def burst(sock: Path) -> float:
        t0 = time.monotonic()
        with ThreadPoolExecutor(3) as pool:
            done = list(
                pool.map(lambda _: call(binary, sock, conf(sleep=0.6)), range(3))
            )
        assert [d.returncode for d in done] == [0, 0, 0], [d.stderr for d in done]
        return time.monotonic() - t0

    wide = start_agent(tmp_path / "wide", "--max-workers", "4", "--spares", "2")
    try:
        assert burst(wide.socket) < 1.5  # three 0.6 s requests at once
    finally:
        wide.stop()
    # Spare workers do not count until they serve: the bound still holds.
    narrow = start_agent(tmp_path / "narrow", "--max-workers", "1", "--spares", "2")
    try:
        assert burst(narrow.socket) >= 1.8  # one at a time
    finally:
        narrow.stop()


# ------------------------------------------------------------ spare workers


def wait_for_ready_spares(agent: AgentProc, count: int) -> None:
    deadline = time.monotonic() + 20
    while agent.log.read_text().count(" ready in ") < count:
        assert time.monotonic() < deadline, agent.log.read_text()[-2000:]
        time.sleep(0.02)


def whoami(binary: Path, sock: Path) -> tuple[int, bool]:
    done = call(binary, sock, conf())
    details = json.loads(done.stdout)["details"]
    pid, prepared = re.fullmatch(r"pid=(\d+) prepared=(True|False)", details).groups()
    return int(pid), prepared == "True"


def test_a_failed_requests_worker_leaves_and_a_prepared_spare_takes_the_next(
    tmp_path: Path,
):
    agent = start_agent(tmp_path / "a", "--spares", "2")
    binary = shim(tmp_path, "whoami")
    try:
        served = []
        for n in range(4):
            wait_for_ready_spares(agent, n + 1)  # one ready spare not yet used
            served.append(whoami(binary, agent.socket))
        assert [prepared for _, prepared in served] == [True] * 4
        assert len({pid for pid, _ in served}) == 4  # whoami fails: no reuse
        assert agent.proc.pid not in {pid for pid, _ in served}
    finally:
        agent.stop()


def wait_for_log(agent: AgentProc, text: str, count: int) -> None:
    deadline = time.monotonic() + 20
    while agent.log.read_text().count(text) < count:
        assert time.monotonic() < deadline, agent.log.read_text()[-2000:]
        time.sleep(0.02)


def served_by(binary: Path, agent: AgentProc, idle_before: int) -> tuple[int, bool]:
    """(pid, prepared) of the worker that served a successful ADD, once
    ``idle_before`` workers went idle after a request (so which one serves is
    decided by the agent, not by a race with the last one's "ready")."""
    wait_for_log(agent, "is idle again", idle_before)
    done = call(binary, agent.socket, conf())
    assert done.returncode == 0, done.stderr
    domain = json.loads(done.stdout)["dns"]["domain"]
    pid, prepared = re.fullmatch(r"pid=(\d+) prepared=(True|False)", domain).groups()
    return int(pid), prepared == "True"


def test_a_worker_serves_requests_one_after_another_up_to_its_share(
    tmp_path: Path,
):
    agent = start_agent(tmp_path / "a", "--spares", "1", "--requests-per-worker", "3")
    binary = shim(tmp_path, "whoami-ok")
    try:
        wait_for_ready_spares(agent, 1)
        first = [served_by(binary, agent, n) for n in range(3)]
        # Its share served, the worker left; the spare forked meanwhile serves.
        wait_for_log(agent, "it served its share", 1)
        then = served_by(binary, agent, 2)
        assert len({pid for pid, _ in first}) == 1, first
        assert then[0] != first[0][0] and then[1], (first, then)
        assert all(prepared for _, prepared in first)
    finally:
        agent.stop()


def test_a_worker_that_kept_a_descriptor_open_leaves_after_that_request(
    tmp_path: Path,
):
    agent = start_agent(tmp_path / "a")
    ok, leak = shim(tmp_path, "whoami-ok"), shim(tmp_path, "leak")
    try:
        before = served_by(ok, agent, 0)
        leaked = served_by(leak, agent, 1)
        wait_for_log(agent, "more file descriptor(s)", 1)
        after = served_by(ok, agent, 1)
        assert before[0] == leaked[0] != after[0]
        assert f"worker {leaked[0]} leaves after 2 request(s)" in agent.log.read_text()
    finally:
        agent.stop()


def test_idle_workers_beyond_the_spares_leave_after_the_idle_timeout(
    tmp_path: Path,
):
    agent = start_agent(tmp_path / "a", "--idle-timeout", "0.5")
    binary = shim(tmp_path, "sleep")
    try:
        with ThreadPoolExecutor(3) as pool:
            done = list(
                pool.map(
                    lambda _: call(binary, agent.socket, conf(sleep=0.3)), range(3)
                )
            )
        assert [d.returncode for d in done] == [0, 0, 0]
        wait_for_log(agent, "is idle again", 3)
        assert len(children(agent.proc.pid)) == 3  # the burst's workers, idle
        deadline = time.monotonic() + 10
        while children(agent.proc.pid):
            assert time.monotonic() < deadline, "idle workers did not leave"
            time.sleep(0.05)
    finally:
        agent.stop()


def test_without_spares_each_request_gets_a_worker_forked_for_it(tmp_path: Path):
    agent = start_agent(tmp_path / "a")
    binary = shim(tmp_path, "whoami")
    try:
        served = [whoami(binary, agent.socket) for _ in range(2)]
        assert [prepared for _, prepared in served] == [False, False]
        assert served[0][0] != served[1][0]
    finally:
        agent.stop()


def test_sigterm_ends_the_idle_spares_with_the_agent(tmp_path: Path):
    agent = start_agent(tmp_path / "a", "--spares", "2")
    wait_for_ready_spares(agent, 2)
    spares = children(agent.proc.pid)
    assert len(spares) == 2
    os.kill(agent.proc.pid, signal.SIGTERM)
    agent.proc.wait(timeout=10)
    wait_gone(spares, "spares")


def test_a_crashing_request_fails_alone(agent: AgentProc, tmp_path: Path):
    crash, echo = shim(tmp_path, "crash"), shim(tmp_path, "echo")
    with ThreadPoolExecutor(2) as pool:
        crashed = pool.submit(call, crash, agent.socket, conf())
        fine = pool.submit(call, echo, agent.socket, conf(prevResult=PREV))
    assert fine.result().returncode == 0
    failed = crashed.result()
    assert failed.returncode == 1
    doc = json.loads(failed.stdout)
    assert doc["code"] == 999
    assert "ended the request without a result" in doc["msg"]
    assert agent.proc.poll() is None  # the agent itself lives on
    assert call(echo, agent.socket, conf(prevResult=PREV)).returncode == 0


def test_the_deadline_holds_through_the_agent(agent: AgentProc, tmp_path: Path):
    t0 = time.monotonic()
    done = call(
        shim(tmp_path, "sleep"),
        agent.socket,
        conf(sleep=30),
        RAILYARD_DEADLINE="0.5",
        RAILYARD_DEADLINE_GRACE="0.5",
    )
    assert time.monotonic() - t0 < 5
    assert done.returncode == 1
    assert json.loads(done.stdout)["code"] == 105


def test_the_shim_bounds_its_wait_on_a_silent_agent(tmp_path: Path):
    # An agent that accepts and never answers (hung): the shim gives up after
    # the deadline, its grace and a margin, with the timeout error.
    sock_path = tmp_path / "silent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(4)
    try:
        t0 = time.monotonic()
        done = call(
            shim(tmp_path, "echo"),
            sock_path,
            conf(),
            RAILYARD_DEADLINE="0.2",
            RAILYARD_DEADLINE_GRACE="0.1",
        )
        waited = time.monotonic() - t0
    finally:
        server.close()
    assert json.loads(done.stdout)["code"] == 105 and done.returncode == 1
    assert waited < 10


def wordless_agent(path: Path) -> tuple[socket.socket, threading.Thread]:
    """A listener that takes one connection and closes it without a word:
    what a shim sees when the agent is killed with its connection queued."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)

    def drop_one() -> None:
        conn, _ = server.accept()
        conn.close()

    thread = threading.Thread(target=drop_one)
    thread.start()
    return server, thread


def test_a_del_the_agent_ended_without_a_word_runs_directly(tmp_path: Path):
    server, thread = wordless_agent(tmp_path / "dying.sock")
    try:
        done = call(
            shim(tmp_path, "railyard-ipam"),
            tmp_path / "dying.sock",
            b"{broken json",
            CNI_COMMAND="DEL",
        )
    finally:
        thread.join(10)
        server.close()
    # The plugin itself read the runtime's stdin (the decode error says so).
    assert json.loads(done.stdout)["code"] == 6 and done.returncode == 1
    assert b"ended without a word); running the plugin directly" in done.stderr


def test_an_add_the_agent_ended_without_a_word_fails_and_is_not_run_twice(
    tmp_path: Path,
):
    server, thread = wordless_agent(tmp_path / "dying.sock")
    try:
        done = call(shim(tmp_path, "railyard-ipam"), tmp_path / "dying.sock", conf())
    finally:
        thread.join(10)
        server.close()
    error = json.loads(done.stdout)
    assert error["code"] == 999 and done.returncode == 1
    assert error["msg"] == "railyard-agent ended the request without a result"
    assert b"running the plugin directly" not in done.stderr


# ------------------------------------------------------------ direct mode


def test_no_socket_runs_the_plugin_directly_with_stdin_untouched(tmp_path: Path):
    binary = shim(tmp_path, "railyard-ipam")
    done = call(binary, tmp_path / "absent.sock", b"{broken json")
    assert done.returncode == 1
    # The decode error proves the plugin read the runtime's stdin itself.
    assert json.loads(done.stdout)["code"] == 6
    notes = [
        line for line in done.stderr.decode().splitlines() if "agent not used" in line
    ]
    assert len(notes) == 1 and "No such file or directory" in notes[0]


def test_a_socket_nobody_listens_on_means_direct_mode_at_once(tmp_path: Path):
    # What a starting (or just killed) agent leaves: the socket file, refusing.
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    t0 = time.monotonic()
    done = call(shim(tmp_path, "railyard-ipam"), stale, b"{broken json")
    assert time.monotonic() - t0 < 5  # no readiness polling
    assert json.loads(done.stdout)["code"] == 6
    assert b"Connection refused" in done.stderr


# ------------------------------------------------------------- security


def test_the_socket_is_0600_in_a_0700_directory(agent: AgentProc):
    assert stat.S_IMODE(agent.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(agent.socket.parent.stat().st_mode) == 0o700
    assert stat.S_ISSOCK(agent.socket.stat().st_mode)


def test_a_peer_with_another_uid_is_refused(tmp_path: Path):
    other_uid = os.geteuid() + 4242
    strict = start_agent(tmp_path, "--uid", str(other_uid))
    try:
        done = call(shim(tmp_path, "echo"), strict.socket, conf(prevResult=PREV))
    finally:
        strict.stop()
    assert done.returncode == 1
    assert f"uid {os.geteuid()} may not use this socket".encode() in done.stderr
    assert "refused a connection from uid" in strict.log.read_text()


def test_sigterm_finishes_the_request_in_flight_and_removes_the_socket(
    agent: AgentProc, tmp_path: Path
):
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            call, shim(tmp_path, "sleep"), agent.socket, conf(sleep=1)
        )
        time.sleep(0.4)
        os.kill(agent.proc.pid, signal.SIGTERM)
        assert pending.result().returncode == 0
    agent.proc.wait(timeout=10)
    assert not agent.socket.exists()


def test_an_add_whose_result_stdout_cannot_take_is_deleted_through_the_agent(
    agent: AgentProc, tmp_path: Path
):
    """stdout full: the runtime never sees the ADD, so the shim DELs it (the
    echo plugin's DEL fails with its PROBE, which shows it ran)."""
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [str(shim(tmp_path, "echo"))],
            input=conf(prevResult=PREV),
            env={**ENV, "RAILYARD_AGENT_SOCKET": str(agent.socket), "PROBE": "back"},
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=30,
        )
    assert done.returncode == 1
    assert b"ADD result could not be written" in done.stderr
    assert b"DEL failed: PROBE=back" in done.stderr  # the rollback's DEL ran
    assert b"Traceback" not in done.stderr


def test_a_del_whose_stdout_fails_is_not_followed_by_anything(
    agent: AgentProc, tmp_path: Path
):
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [str(shim(tmp_path, "echo"))],
            input=conf(),
            env={
                **ENV,
                "CNI_COMMAND": "DEL",
                "RAILYARD_AGENT_SOCKET": str(agent.socket),
            },
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=30,
        )
    assert done.returncode == 1
    assert b"rolling back" not in done.stderr
