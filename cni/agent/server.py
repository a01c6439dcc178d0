# SPDX-License-Identifier: Apache-2.0
"""``railyard-agent``: the node agent that runs plugin commands for the shims.

Model: **forked workers from a parent that imported everything, each serving
one request at a time.** The parent imports the plugins' commands and their
heavy dependencies (pyroute2, grpc, ours) once, freezes the garbage
collector's view of that heap, then only accepts connections, hands each to
an idle worker (SCM_RIGHTS) or forks one for it. A worker runs exactly what
direct mode runs, ``cni.skel.run_plugin(funcs, about, env=..., stdin=...,
stdout=..., stderr=...)`` in its main thread, so results, errors, logs and the
SIGALRM deadline are the plugin's own.

Why processes and not threads: the GIL serialises threads, and a plugin's ADD
spends a good part of its time in Python (message building, state records);
workers run in parallel on every core. A crash (a segfault in a C extension,
the deadline's watchdog ``_exit``) ends one request only: a worker serves one
at a time. The parent never opens a gRPC channel or a netlink socket, so
nothing is shared across ``fork`` (gRPC's fork support stays off).

Why a worker serves more than one request: a fork, the copy-on-write faults of
a fresh child touching the inherited heap, its exit and its first gRPC channel
cost ~20 ms of CPU per request, more than the plugin's own Python; in a burst
of pods (CPU-bound on a small node) that is a third of the wall time. After a
request a worker goes back to the pool unless something says it is no longer
the clean state the next request expects (``WorkerState``): the request failed,
its file descriptors or threads grew, its main thread is not in the netns it
started in, or it served ``requests_per_worker`` requests. Then it exits and a
fresh one is forked. ``requests_per_worker=1`` is one process per request.

Spare workers: a worker's fork, gRPC's start and its connection to ipamd need
nothing from the request, so the agent keeps ``spares`` idle workers ahead. A
new one runs ``prepare`` (opens the ipamd channel, see
``ipamd.client.open_ahead``) before it says ready. With no idle worker (a
burst) the parent forks one for the connection, which joins the pool after
it. Idle workers beyond ``spares`` leave after ``idle_timeout``, and any idle
one after ``SPARE_MAX_AGE``, so none keeps a connection (or TLS files read
long ago) for hours. Idle workers end with the agent (PR_SET_PDEATHSIG).

Serialisation: none here. Per-PCI and per-PF file locks inside the plugin code
order what must be ordered, exactly as between exec'd plugins. Concurrency is
bounded (``max_workers`` requests at once): at the limit the parent stops
accepting and connections wait in the listen backlog, so a burst of pods
cannot exhaust memory (multus #1346); each waiting shim still honours its
deadline.

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
import enum
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
from cni.agent.metrics import Channel, Sample
from cni.errors import INTERNAL, CniError
from cni.skel import FuncsFactory, run_plugin

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/run/railyard/agent/agent.sock")
DEFAULT_MAX_WORKERS = 16
DEFAULT_SPARES = 0
DEFAULT_REQUESTS_PER_WORKER = 200
#: Idle workers beyond ``spares`` (a burst's) leave after this long idle.
DEFAULT_IDLE_TIMEOUT = 30.0
#: A connected shim must send its whole request within this (it has it in memory).
REQUEST_TIMEOUT = 10.0
#: An idle worker older than this is replaced.
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


def serve_request(
    conn: socket.socket, table: PluginTable, metrics: Channel | None = None
) -> int:
    """Run one shim request in this (forked) process; the plugin's exit status.

    With ``metrics``, the command's duration and its steps go to the agent's
    metrics sidecar once the shim has the exit status."""
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
    # They come back after it: the worker's own lines go to the agent's log.
    root = logging.getLogger()
    agent_handlers, agent_level = root.handlers[:], root.level
    root.handlers.clear()
    out = wire.ReplyStream(conn, b"O", lock)
    err = wire.ReplyStream(conn, b"E", lock)
    if metrics is not None:
        metrics.start_request()
    t0 = time.perf_counter()
    try:
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
    finally:
        root.handlers[:] = agent_handlers
        root.setLevel(agent_level)
    seconds = time.perf_counter() - t0
    try:
        wire.send_status(conn, code, lock)
    except OSError:
        pass  # the shim is gone; the command itself completed
    if metrics is not None:
        command = req.env.get("CNI_COMMAND", "")
        metrics.send(Sample.of(req.plugin, command, code, seconds))
    return code


#: A sidecar that dies (its port taken, a bug) is started again after this,
#: so a persistent failure logs every few seconds instead of spinning.
SIDECAR_RESTART_DELAY = 2.0


#: libc, loaded once by the parent: every worker sets its parent-death signal,
#: and each would otherwise import ctypes and load libc again (~2 ms of CPU).
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


class Phase(enum.Enum):
    """Where a pooled worker is, as its parent knows it."""

    PREPARING = "preparing"  # a spare forked, not ready yet
    IDLE = "idle"  # said ready; waiting to be handed a request
    BUSY = "busy"  # serving a request (one forked for a request starts here)


@dataclass(slots=True)
class _Worker:
    """The parent's end of a pooled worker."""

    pid: int
    control: socket.socket  # the worker says ready here and receives requests
    born: float
    phase: Phase
    idle_since: float = 0.0


@dataclass(frozen=True, slots=True)
class WorkerState:
    """What a worker looks like between requests; a request that changed it
    leaves the worker unfit for the next one (it exits, a fresh one comes)."""

    fds: int
    threads: frozenset[str]
    netns: int

    @staticmethod
    def now(known: frozenset[str] = frozenset(), settle: float = 0.1) -> WorkerState:
        """This process now, once threads not in ``known`` had up to ``settle``
        seconds to end: a request may leave one finishing (a cancelled
        deadline timer, a packet socket's close)."""
        until = time.monotonic() + settle
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and thread.name not in known:
                thread.join(max(0.0, until - time.monotonic()))
        return WorkerState(
            fds=len(os.listdir("/proc/self/fd")),
            threads=frozenset(t.name for t in threading.enumerate()),
            netns=os.stat("/proc/thread-self/ns/net").st_ino,
        )

    def differs(self, other: WorkerState) -> str:
        """Why ``other`` (after a request) is not this state; "" when it is."""
        if other.netns != self.netns:
            return "its main thread is in another netns"
        if other.fds > self.fds:
            return f"it holds {other.fds - self.fds} more file descriptor(s)"
        if other.threads - self.threads:
            extra = ", ".join(sorted(other.threads - self.threads))
            return f"it runs more threads: {extra}"
        return ""


def _exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


@dataclass(slots=True)
class _Child:
    """A long-lived child of the agent (``Agent``'s sidecar, reconciler)."""

    name: str
    body: Callable[[], None]
    pid: int = 0
    due: float = 0.0  # when it is started again after it died


class Agent:
    """Accepts shim connections on a unix socket; pooled workers serve them.

    ``sidecar``, when given, runs in one more forked process for the agent's
    lifetime (the RDMA metrics server), started again if it dies and stopped
    with the agent; ``reconciler`` (``cni.agent.reconcile``) the same way.
    ``spares`` idle workers are kept ahead, a new one having
    run ``prepare`` (see the module docstring); ``max_workers`` bounds the
    requests served at once; a worker serves up to ``requests_per_worker``,
    having run ``worker_setup`` once before the first. ``metrics``: each
    worker sends what it served there (``cni.agent.metrics``), the sidecar
    reads it.
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
        requests_per_worker: int = DEFAULT_REQUESTS_PER_WORKER,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        worker_setup: Callable[[], None] | None = None,
        metrics: Channel | None = None,
        reconciler: Callable[[], None] | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        if spares < 0:
            raise ValueError("spares must be >= 0")
        if requests_per_worker < 1:
            raise ValueError("requests_per_worker must be >= 1")
        self.table = table
        self.socket_path = Path(socket_path)
        self.max_workers = max_workers
        self.allowed_uids = allowed_uids
        self.preload = tuple(preload)
        self.spares = spares
        self.requests_per_worker = requests_per_worker
        self.idle_timeout = idle_timeout
        self._prepare = prepare
        self._worker_setup = worker_setup
        self._metrics = metrics
        self._pool: dict[int, _Worker] = {}
        self._spare_due = 0.0  # when a spare that died unready is replaced
        self._listener: socket.socket | None = None
        self._socket_ino = 0
        # Let go of (retired, or one-shot): reaped when they end.
        self._workers: set[int] = set()
        self._stopping = False
        # Long-lived children by name: body, pid (0: not running), and when
        # a dead one is started again.
        self._children: dict[str, _Child] = {
            name: _Child(name, body)
            for name, body in (("sidecar", sidecar), ("reconciler", reconciler))
            if body is not None
        }

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

    def _busy(self) -> int:
        """Requests being served (a worker let go may still be finishing one)."""
        return len(self._workers) + sum(
            w.phase is Phase.BUSY for w in self._pool.values()
        )

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
                for child in self._children.values():
                    if not child.pid and time.monotonic() >= child.due:
                        self._start_child(child, listener)
                self._tend_pool(listener)
                controls = [
                    w.control for w in self._pool.values() if w.phase is not Phase.IDLE
                ]
                # At the bound the backlog holds the next connections; the
                # workers' "ready" still comes in.
                accepting = self._busy() < self.max_workers
                try:
                    ready, _, _ = select.select(
                        [listener, *controls] if accepting else controls,
                        [],
                        [],
                        0.2 if accepting else 0.002,
                    )
                except InterruptedError:
                    continue
                for sock in ready:
                    if sock is listener:
                        self._accept_one(listener)
                    else:
                        self._worker_said(sock)
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
            if not self._hand_to_idle(conn):
                self._fork_worker(listener, conn)
        finally:
            conn.close()

    def _leave_parent(self, listener: socket.socket) -> None:
        """In a freshly forked child: drop what only the parent serves with."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        listener.close()
        for worker in self._pool.values():
            worker.control.close()

    # -------------------------------------------------------------- workers

    def _idle(self) -> list[_Worker]:
        """The idle workers, the most recently busy first: the ones handed the
        next requests (their pages are warm) and kept when idle ones retire."""
        idle = [w for w in self._pool.values() if w.phase is Phase.IDLE]
        return sorted(idle, key=lambda w: w.idle_since, reverse=True)

    def _tend_pool(self, listener: socket.socket) -> None:
        """Fork spares up to ``spares`` not busy; retire idle workers that are
        too old, or beyond ``spares`` and idle for ``idle_timeout``."""
        now = time.monotonic()
        for n, worker in enumerate(self._idle()):
            if now - worker.born > SPARE_MAX_AGE:
                self._let_go(worker)
            elif n >= self.spares and now - worker.idle_since > self.idle_timeout:
                self._let_go(worker)
        not_busy = sum(w.phase is not Phase.BUSY for w in self._pool.values())
        while not_busy < self.spares and now >= self._spare_due:
            self._fork_worker(listener, None)
            not_busy += 1

    def _fork_worker(self, listener: socket.socket, conn: socket.socket | None) -> None:
        """A worker serving ``conn`` first, or a spare (``conn`` None)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        parent = os.getpid()
        pid = os.fork()
        if pid:
            theirs.close()
            phase = Phase.BUSY if conn else Phase.PREPARING
            self._pool[pid] = _Worker(pid, ours, time.monotonic(), phase)
            return

        def work() -> int:
            self._leave_parent(listener)
            ours.close()
            return self._worker_main(theirs, parent, conn)

        _end_child("worker", work)

    def _worker_main(
        self, control: socket.socket, parent: int, conn: socket.socket | None
    ) -> int:
        """A worker: (a spare prepares first) serve requests one at a time,
        saying ready between them, until it is unfit or told to go."""
        if self._worker_setup is not None:
            self._worker_setup()
        if conn is None:
            _end_with(parent)  # idle, it has nothing to finish
            if self._prepare is not None:
                t0 = time.monotonic()
                try:
                    self._prepare()
                except Exception as exc:  # a request can still be served without
                    log.warning(
                        "spare worker %d: preparing failed: %s", os.getpid(), exc
                    )
                log.debug(
                    "spare worker %d ready in %.1f ms",
                    os.getpid(),
                    (time.monotonic() - t0) * 1000,
                )
        clean: WorkerState | None = None  # taken after the first request
        served = 0
        status = 0
        while True:
            if conn is None:
                try:
                    control.sendall(_READY)
                    _, fds, _, _ = socket.recv_fds(control, 1, 1)
                except OSError:
                    return status  # the parent retired this worker
                if not fds:
                    return status  # the parent retired this worker or is stopping
                conn = socket.socket(fileno=fds[0])
            # Serving now: it finishes its request whatever happens to the parent.
            _set_parent_death_signal(0)
            try:
                status = serve_request(conn, self.table, self._metrics)
            finally:
                conn.close()
                conn = None
            served += 1
            why = self._unfit(status, served)
            changed = ""
            if clean is not None and not why:
                changed = clean.differs(WorkerState.now(clean.threads))
            if why or changed:
                # A state a request left behind is a leak to look into.
                log.log(
                    logging.WARNING if changed else logging.DEBUG,
                    "worker %d leaves after %d request(s): %s",
                    os.getpid(),
                    served,
                    why or changed,
                )
                return status
            if clean is None:
                # What the first request set up for good (gRPC's threads and
                # descriptors) is part of the state every later one finds.
                clean = WorkerState.now()
            _end_with(parent)

    def _unfit(self, status: int, served: int) -> str:
        """Why this worker ends after its request, whatever state it is in."""
        if status != 0:
            return f"its request ended with status {status}"
        if served >= self.requests_per_worker:
            return "it served its share"
        return ""

    def _worker_said(self, control: socket.socket) -> None:
        worker = next((w for w in self._pool.values() if w.control is control), None)
        if worker is None:  # reaped meanwhile
            return
        try:
            said = control.recv(1)
        except OSError:
            said = b""
        if said == _READY:
            if worker.phase is Phase.BUSY:
                log.debug("worker %d is idle again", worker.pid)
            worker.phase = Phase.IDLE
            worker.idle_since = time.monotonic()
            return
        # The worker is going: unfit after a request, or it ended unready.
        if worker.phase is not Phase.BUSY:
            # It ended before it was ready. Forking the next one at once would
            # spin if preparing always fails.
            log.warning("spare worker %d ended before it was ready", worker.pid)
            self._spare_due = time.monotonic() + SIDECAR_RESTART_DELAY
        self._let_go(worker)

    def _hand_to_idle(self, conn: socket.socket) -> bool:
        """Pass ``conn`` to an idle worker (``_idle``'s order); False when
        none took it."""
        for worker in self._idle():
            try:
                socket.send_fds(worker.control, [b"C"], [conn.fileno()])
            except OSError:  # it died since it said ready: the next one
                self._let_go(worker)
                continue
            worker.phase = Phase.BUSY
            return True
        return False

    def _let_go(self, worker: _Worker) -> None:
        """Stop pooling ``worker``: close our end of its control socket and
        reap it like a one-shot worker. It finishes what it serves; an idle
        one leaves when it sees the socket closed."""
        del self._pool[worker.pid]
        worker.control.close()
        self._workers.add(worker.pid)

    def _start_child(self, child: _Child, listener: socket.socket) -> None:
        """Fork a long-lived child (the metrics server, the reconciler): a
        process of its own, so its threads never share a heap with the parent
        that forks the workers."""
        parent = os.getpid()
        pid = os.fork()
        if pid:
            child.pid = pid
            log.info("%s started (pid %d)", child.name, pid)
            return
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _end_with(parent)
            listener.close()
            for worker in self._pool.values():
                worker.control.close()
            child.body()
        except BaseException as exc:  # noqa: BLE001 - the child never returns
            try:
                log.error("%s failed: %s", child.name, exc)
            finally:
                os._exit(70)
        os._exit(0)

    def _child_of(self, pid: int) -> _Child | None:
        return next((c for c in self._children.values() if c.pid == pid), None)

    def _reap(self) -> None:
        while (
            self._workers or self._pool or any(c.pid for c in self._children.values())
        ):
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self._workers.clear()
                for child in self._children.values():
                    child.pid = 0
                for worker in self._pool.values():
                    worker.control.close()
                self._pool.clear()
                return
            if pid == 0:
                return
            pooled = self._pool.pop(pid, None)
            if pooled is not None:
                # Ended while pooled: before its "ready", or while serving
                # (killed); an unfit one is let go when its socket closes.
                pooled.control.close()
                if pooled.phase is not Phase.BUSY:
                    self._spare_due = time.monotonic() + SIDECAR_RESTART_DELAY
                    log.warning("spare worker %d ended (%s)", pid, _exit_text(status))
                    continue
            ended = self._child_of(pid)
            if ended is not None:
                ended.pid = 0
                ended.due = time.monotonic() + SIDECAR_RESTART_DELAY
                log.warning(
                    "%s %d ended (%s); starting it again in %.0f s",
                    ended.name,
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
        for worker in list(self._pool.values()):
            self._let_go(worker)
        for child in self._children.values():
            if not child.pid:
                continue
            try:
                os.kill(child.pid, signal.SIGTERM)
                os.waitpid(child.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            child.pid = 0
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
