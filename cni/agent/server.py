# SPDX-License-Identifier: Apache-2.0
"""``railyard-agent``: the node agent that runs plugin commands for the shims.

Model: **one forked worker per request, from a parent that imported everything.**
The parent imports the plugins' commands and their heavy dependencies (pyroute2,
grpc, ours) once, freezes the garbage collector's view of that heap, then only
accepts connections and forks. The child runs exactly what direct mode runs,
``cni.skel.run_plugin(funcs, about, env=..., stdin=..., stdout=..., stderr=...)``
in its main thread, so results, errors, logs and the SIGALRM deadline are the
plugin's own; then it ``_exit``s.

Why fork and not threads or a worker pool: the GIL serialises threads, and a
plugin's ADD spends a good part of its time in Python (message building,
state records); forked children run in parallel on every core. A crash (a
segfault in a C extension, the deadline's watchdog ``_exit``) ends one
request only. Every child starts from the same clean, warm state, so no
state leaks from one request into the next (what a long-lived worker pool
would have to prove), and the parent never opens a gRPC channel or a netlink
socket, so nothing is shared across ``fork`` (gRPC's fork support stays off).

Spare workers: a worker's fork, gRPC's start and its connection to ipamd
(~10 ms of a ~80 ms ADD) need nothing from the request, so the agent keeps
``spares`` workers forked ahead. Each runs ``prepare`` (opens the ipamd
channel, see ``ipamd.client.open_ahead``), says it is ready and waits; the
parent passes it the next accepted connection (SCM_RIGHTS) and forks the
next spare. Still one request per process: a spare is a worker forked
early, not a pool. With no spare ready (a burst, or one still preparing)
the parent forks on demand, as without spares. Idle spares end with the
agent (PR_SET_PDEATHSIG) and are replaced after ``SPARE_MAX_AGE``, so none
keeps a connection (or TLS files read long ago) for hours.

Serialisation: none here. Per-PCI and per-PF file locks inside the plugin code
order what must be ordered, exactly as between exec'd plugins. Concurrency is
bounded (``max_workers``): at the limit the parent stops accepting and
connections wait in the listen backlog, so a burst of pods cannot exhaust
memory (multus #1346); each waiting shim still honours its deadline.

Security: the socket is created 0600 inside a 0700 directory and every peer's
SO_PEERCRED uid must be in ``allowed_uids`` (root only in production).

Lifecycle: the socket appears (an atomic rename) only once the imports are
done; until then, and after a stop, the shims run the plugin directly (see
``cni.agent.shim``), so a starting agent never blocks an ADD. SIGTERM stops
accepting, removes the socket and waits for the requests in flight. A
SIGKILL of the whole group ends the commands in flight like a SIGKILL of an
exec'd plugin: the record written before the first change lets the runtime's
next DEL (or ADD) finish the job.
"""

from __future__ import annotations

import ctypes
import gc
import io
import logging
import os
import select
import signal
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import IO, NoReturn, cast

from cni import version as cni_version
from cni.agent import wire
from cni.errors import INTERNAL, CniError
from cni.skel import FuncsFactory, run_plugin

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/run/railyard/agent/agent.sock")
DEFAULT_MAX_WORKERS = 16
DEFAULT_SPARES = 0
#: A connected shim must send its whole request within this (it has it in memory).
REQUEST_TIMEOUT = 10.0
#: An idle spare worker is replaced after this long.
SPARE_MAX_AGE = 300.0
_READY = b"R"
_UCRED = struct.Struct("3i")


@dataclass(frozen=True, slots=True)
class PluginEntry:
    """How the agent runs one CNI type: what direct mode passes to ``skel.main``."""

    funcs: FuncsFactory
    about: str
    plugin_name: str


PluginTable = Mapping[str, PluginEntry]


def peer_uid(conn: socket.socket) -> int:
    cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return int(_UCRED.unpack(cred)[1])


def prepare_socket_dir(path: Path) -> None:
    """Create ``path``'s directory 0700 (tightening an existing one we own)."""
    d = path.parent
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = d.stat()
    if st.st_uid != os.geteuid():
        raise PermissionError(f"{d} belongs to uid {st.st_uid}, not to this agent")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(d, 0o700)


def _error_reply(conn: socket.socket, lock: threading.Lock, err: CniError) -> None:
    """What a worker says when it cannot even start the plugin."""
    import json

    doc = err.to_json(cni_version.CURRENT)
    wire.ReplyStream(conn, b"O", lock).write(json.dumps(doc) + "\n")
    wire.send_status(conn, 1, lock)


def serve_request(conn: socket.socket, table: PluginTable) -> int:
    """Run one shim request in this (forked) process; the plugin's exit status."""
    lock = threading.Lock()
    try:
        conn.settimeout(REQUEST_TIMEOUT)
        req = wire.read_request(conn)
        conn.settimeout(None)
    except (wire.WireError, OSError) as exc:
        log.warning("dropping a malformed request: %s", exc)
        return 1
    entry = table.get(req.plugin)
    if entry is None:
        _error_reply(
            conn,
            lock,
            CniError(
                INTERNAL,
                f"railyard-agent has no plugin {req.plugin!r}",
                f"it serves {sorted(table)}",
            ),
        )
        return 1
    # The plugin sees the runtime's environment, exactly as when exec'd.
    os.environ.clear()
    os.environ.update(req.env)
    # The agent's own handlers would copy the plugin's log lines to the
    # agent's log; direct mode has only the plugin's (stderr or logFile).
    logging.getLogger().handlers.clear()
    out = wire.ReplyStream(conn, b"O", lock)
    err = wire.ReplyStream(conn, b"E", lock)
    code = run_plugin(
        entry.funcs,
        entry.about,
        env=os.environ,
        stdin=io.BytesIO(req.stdin),
        stdout=cast(IO[str], out),
        stderr=cast(IO[str], err),
        argv=req.argv,
        plugin_name=entry.plugin_name,
    )
    try:
        wire.send_status(conn, code, lock)
    except OSError:
        pass  # the shim is gone; the command itself completed
    return code


#: A sidecar that dies (its port taken, a bug) is started again after this,
#: so a persistent failure logs every few seconds instead of spinning.
SIDECAR_RESTART_DELAY = 2.0


#: libc, loaded once by the parent: a spare is forked per request, and each
#: would otherwise import ctypes and load libc again (~2 ms of CPU in bursts).
_LIBC = ctypes.CDLL(None, use_errno=True)


def _set_parent_death_signal(sig: int) -> None:
    pr_set_pdeathsig = 1  # <linux/prctl.h>
    if _LIBC.prctl(pr_set_pdeathsig, sig, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def _end_with(parent: int) -> None:
    """SIGTERM this process when ``parent`` dies, even by SIGKILL: an orphaned
    sidecar would keep its port, and the next agent's sidecar could not bind;
    an orphaned spare worker would wait for a request forever."""
    _set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # it died before prctl took effect
        os._exit(0)


def _end_child(what: str, body: Callable[[], int]) -> NoReturn:
    """Run a forked child's ``body``, then end the process: a child never
    returns into the parent's serving loop, whatever ``body`` raises."""
    status = 70
    try:
        status = body()
    except BaseException as exc:  # noqa: BLE001 - the child never returns
        try:
            log.exception("%s failed: %s", what, exc)
        finally:
            os._exit(70)
    os._exit(0 if status in (0, 1) else status)


@dataclass(slots=True)
class _Spare:
    """The parent's end of a spare worker."""

    pid: int
    control: socket.socket  # the spare says ready here and receives its request
    born: float
    ready: bool = False


def _exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


class Agent:
    """Accepts shim connections on a unix socket and forks one worker per request.

    ``sidecar``, when given, runs in one more forked process for the agent's
    lifetime (the RDMA metrics server), started again if it dies and stopped
    with the agent. ``spares`` workers are kept forked ahead, each having run
    ``prepare`` (see the module docstring); they do not count against
    ``max_workers`` until they serve.
    """

    def __init__(
        self,
        table: PluginTable,
        socket_path: Path = DEFAULT_SOCKET,
        max_workers: int = DEFAULT_MAX_WORKERS,
        allowed_uids: frozenset[int] = frozenset({0}),
        preload: Sequence[str] = (),
        sidecar: Callable[[], None] | None = None,
        spares: int = DEFAULT_SPARES,
        prepare: Callable[[], None] | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        if spares < 0:
            raise ValueError("spares must be >= 0")
        self.table = table
        self.socket_path = Path(socket_path)
        self.max_workers = max_workers
        self.allowed_uids = allowed_uids
        self.preload = tuple(preload)
        self.spares = spares
        self._prepare = prepare
        self._spares: dict[int, _Spare] = {}
        self._spare_due = 0.0  # when a spare that died unused is replaced
        self._listener: socket.socket | None = None
        self._socket_ino = 0
        self._workers: set[int] = set()
        self._stopping = False
        self._sidecar = sidecar
        self._sidecar_pid = 0
        self._sidecar_due = 0.0  # when a dead sidecar is started again

    # ------------------------------------------------------------- start-up

    def warm(self) -> None:
        """Import what every request would import, then freeze that heap."""
        t0 = time.monotonic()
        for name in self.preload:
            import_module(name)
        for entry in self.table.values():
            entry.funcs()  # imports the plugin's commands and what they use
        # Children inherit these objects copy-on-write; a collection in a child
        # would touch (and copy) every page of them for nothing.
        gc.collect()
        gc.freeze()
        log.info(
            "warm in %.0f ms: %s", (time.monotonic() - t0) * 1000, sorted(self.table)
        )

    def bind(self) -> None:
        """Listen on a 0600 socket that appears at ``socket_path`` atomically."""
        prepare_socket_dir(self.socket_path)
        tmp = self.socket_path.with_name(f".{self.socket_path.name}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(str(tmp))
        finally:
            os.umask(old_umask)
        os.chmod(tmp, 0o600)
        sock.listen(128)
        os.replace(tmp, self.socket_path)
        self._socket_ino = os.stat(self.socket_path).st_ino
        self._listener = sock
        log.info(
            "listening on %s (max %d workers, peers uid %s)",
            self.socket_path,
            self.max_workers,
            sorted(self.allowed_uids),
        )

    # ------------------------------------------------------------- serving

    def request_stop(self, *_: object) -> None:
        self._stopping = True

    def serve_forever(self) -> None:
        """Accept until SIGTERM/SIGINT (or ``request_stop``), then drain."""
        if self._listener is None:
            raise RuntimeError("bind() first")
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        listener = self._listener
        try:
            while not self._stopping:
                self._reap()
                if self._sidecar and not self._sidecar_pid:
                    if time.monotonic() >= self._sidecar_due:
                        self._start_sidecar(listener)
                self._tend_spares(listener)
                if len(self._workers) >= self.max_workers:
                    time.sleep(0.002)  # the backlog holds the next connections
                    continue
                waiting = [s.control for s in self._spares.values() if not s.ready]
                try:
                    ready, _, _ = select.select([listener, *waiting], [], [], 0.2)
                except InterruptedError:
                    continue
                for sock in ready:
                    if sock is listener:
                        self._accept_one(listener)
                    else:
                        self._spare_said(sock)
        finally:
            self.close()
            self._drain()

    def _accept_one(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except OSError as exc:  # EMFILE and friends: let the backlog wait
            log.error("accept on %s: %s", self.socket_path, exc)
            time.sleep(0.05)
            return
        try:
            uid = peer_uid(conn)
            if uid not in self.allowed_uids:
                log.warning("refused a connection from uid %d", uid)
                lock = threading.Lock()
                wire.ReplyStream(conn, b"E", lock).write(
                    f"railyard-agent: uid {uid} may not use this socket\n"
                )
                return
            self._fork(conn, listener)
        finally:
            conn.close()

    def _fork(self, conn: socket.socket, listener: socket.socket) -> None:
        if self._hand_to_spare(conn):
            return
        pid = os.fork()
        if pid:
            self._workers.add(pid)
            return
        # The worker: nothing of the parent's serving state is used from here.

        def serve() -> int:
            self._leave_parent(listener)
            return serve_request(conn, self.table)

        _end_child("worker", serve)

    def _leave_parent(self, listener: socket.socket) -> None:
        """In a freshly forked child: drop what only the parent serves with."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        listener.close()
        for spare in self._spares.values():
            spare.control.close()

    # -------------------------------------------------------- spare workers

    def _tend_spares(self, listener: socket.socket) -> None:
        """Fork spares up to ``spares``; replace the ones idle for too long."""
        now = time.monotonic()
        for spare in list(self._spares.values()):
            if spare.ready and now - spare.born > SPARE_MAX_AGE:
                self._let_go(spare)
        while len(self._spares) < self.spares and now >= self._spare_due:
            self._fork_spare(listener)

    def _fork_spare(self, listener: socket.socket) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        parent = os.getpid()
        pid = os.fork()
        if pid:
            theirs.close()
            self._spares[pid] = _Spare(pid, ours, time.monotonic())
            return

        def spare() -> int:
            self._leave_parent(listener)
            ours.close()
            return self._spare_main(theirs, parent)

        _end_child("spare worker", spare)

    def _spare_main(self, control: socket.socket, parent: int) -> int:
        """A spare: prepare, say ready, wait for a connection, serve it."""
        _end_with(parent)  # idle, it has nothing to finish
        if self._prepare is not None:
            t0 = time.monotonic()
            try:
                self._prepare()
            except Exception as exc:  # a request can still be served without
                log.warning("spare worker %d: preparing failed: %s", os.getpid(), exc)
            log.debug(
                "spare worker %d ready in %.1f ms",
                os.getpid(),
                (time.monotonic() - t0) * 1000,
            )
        try:
            control.sendall(_READY)
            _, fds, _, _ = socket.recv_fds(control, 1, 1)
        except OSError:
            return 0  # the parent retired this spare while it prepared
        if not fds:
            return 0  # the parent retired this spare or is stopping
        # Serving now: like any worker, it finishes its request whatever
        # happens to the parent.
        _set_parent_death_signal(0)
        control.close()
        return serve_request(socket.socket(fileno=fds[0]), self.table)

    def _spare_said(self, control: socket.socket) -> None:
        spare = next((s for s in self._spares.values() if s.control is control), None)
        if spare is None:  # reaped meanwhile
            return
        try:
            said = control.recv(1)
        except OSError:
            said = b""
        if said == _READY:
            spare.ready = True
            return
        # It ended before it was ready. Forking the next one at once would
        # spin if preparing always fails.
        log.warning("spare worker %d ended before it was ready", spare.pid)
        self._let_go(spare)
        self._spare_due = time.monotonic() + SIDECAR_RESTART_DELAY

    def _hand_to_spare(self, conn: socket.socket) -> bool:
        """Pass ``conn`` to a ready spare; False when none took it."""
        for spare in [s for s in self._spares.values() if s.ready]:
            try:
                socket.send_fds(spare.control, [b"C"], [conn.fileno()])
                sent = True
            except OSError:  # it died since it said ready: the next one
                sent = False
            self._let_go(spare)
            if sent:
                return True
        return False

    def _let_go(self, spare: _Spare) -> None:
        """Stop keeping ``spare`` as a spare: close our end of its control
        socket and reap it like any worker. It serves the connection it was
        sent, if any; an idle one leaves when it sees the socket closed."""
        del self._spares[spare.pid]
        spare.control.close()
        self._workers.add(spare.pid)

    def _start_sidecar(self, listener: socket.socket) -> None:
        """Fork the sidecar (the metrics server): a process of its own, so its
        threads never share a heap with the parent that forks the workers."""
        assert self._sidecar is not None
        parent = os.getpid()
        pid = os.fork()
        if pid:
            self._sidecar_pid = pid
            log.info("sidecar started (pid %d)", pid)
            return
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _end_with(parent)
            listener.close()
            self._sidecar()
        except BaseException as exc:  # noqa: BLE001 - the child never returns
            try:
                log.error("sidecar failed: %s", exc)
            finally:
                os._exit(70)
        os._exit(0)

    def _reap(self) -> None:
        while self._workers or self._sidecar_pid or self._spares:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self._workers.clear()
                self._sidecar_pid = 0
                for spare in self._spares.values():
                    spare.control.close()
                self._spares.clear()
                return
            if pid == 0:
                return
            unused = self._spares.pop(pid, None)
            if unused is not None:  # a spare that ended before serving
                unused.control.close()
                self._spare_due = time.monotonic() + SIDECAR_RESTART_DELAY
                log.warning("spare worker %d ended (%s)", pid, _exit_text(status))
                continue
            if pid == self._sidecar_pid:
                self._sidecar_pid = 0
                self._sidecar_due = time.monotonic() + SIDECAR_RESTART_DELAY
                log.warning(
                    "sidecar %d ended (%s); starting it again in %.0f s",
                    pid,
                    _exit_text(status),
                    SIDECAR_RESTART_DELAY,
                )
                continue
            self._workers.discard(pid)
            if os.WIFSIGNALED(status):
                log.warning(
                    "worker %d was killed by signal %d", pid, os.WTERMSIG(status)
                )

    def _drain(self) -> None:
        for spare in list(self._spares.values()):
            self._let_go(spare)
        if self._sidecar_pid:
            try:
                os.kill(self._sidecar_pid, signal.SIGTERM)
                os.waitpid(self._sidecar_pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self._sidecar_pid = 0
        if self._workers:
            log.info("waiting for %d request(s) in flight", len(self._workers))
        while self._workers:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            self._workers.discard(pid)

    def close(self) -> None:
        """Stop accepting: new shims find no socket and run plugins directly."""
        if self._listener is None:
            return
        try:
            # Only our own socket: a newer agent may have replaced it already.
            if os.stat(self.socket_path).st_ino == self._socket_ino:
                self.socket_path.unlink()
        except OSError:
            pass
        self._listener.close()
        self._listener = None
