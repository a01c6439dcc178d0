# SPDX-License-Identifier: Apache-2.0
"""The exec'd CNI binary of the warm path: a stdlib-only client of ``railyard-agent``.

This file is the whole program. ``packaging/install.sh`` renders it once per CNI
type (``render()`` below bakes in the plugin, the agent socket and the venv
interpreter, and carries the code compiled for that interpreter beside the
source: ``_launcher``) and installs it with the shebang ``#!<venv python> -IS``: no
site-packages, no environment steering, nothing imported but the built-in
``posix``, ``sys`` and ``_socket`` (``os`` costs a few modules more, ``socket``
pulls in ``enum`` and doubles the start-up). What it does, per ``CNI_COMMAND``:

- VERSION: answered here, no agent, no stdin read (podman runs it before every
  ADD and DEL).
- anything else: connect to the agent's unix socket first. Connected: check the
  peer is root (SO_PEERCRED), send the environment, argv and stdin verbatim,
  relay the agent's stdout and stderr as they come and exit with its status.
  Not connected (no socket, ``ECONNREFUSED`` because the agent is starting or
  gone, or a peer that is not root): one log line on stderr, then exec the
  venv's interpreter running the real plugin with stdin untouched: direct
  mode, exactly the plugin as it ran before the agent existed. A node without
  the agent works; an agent restarting costs nothing but its warm start.
  Unlike multus' shim there is no readiness polling (up to 60 s there) and a
  DEL error is never swallowed: the runtime sees every failure and retries.
  An agent that ends the connection without a word (killed with it in its
  backlog) gets the same treatment for every command but ADD, which must not
  run twice: the plugin runs directly.
- the deadline holds end to end: the wait on the agent is bounded by the
  command's deadline (``RAILYARD_DEADLINE``, else ``DEADLINE``) plus the
  plugin's own grace and a margin; past it the shim prints error 105.

Wire format (``cni.agent.wire`` is the agent's side): frames of one kind byte,
a 4-byte big-endian length and the payload. Request: ``P`` the plugin's CNI
type, ``A`` argv and ``V`` the environment (NUL-separated bytes, as the kernel
hands them over), ``I`` stdin. Reply: ``O`` stdout bytes, ``E`` stderr
bytes, ``X`` the exit status (4 bytes). A reply that ends without ``X`` means
the worker died: exit 1, and an error document when nothing was printed yet.
"""

from __future__ import annotations

import _socket
import posix
import sys

# typing itself is not imported: it would cost more than this whole program.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

# ---- baked in by render(); the values below serve tests and a checkout -----
PLUGIN = "sriov"
#: What direct mode runs with ``PYTHON -I -c``: the plugin's own entry point.
DIRECT = "import sys; from cni.plugins.sriov.__main__ import main; sys.exit(main())"
PYTHON = sys.executable
SOCKET = "/run/railyard/agent/agent.sock"
SUPPORTED = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
CURRENT = "1.1.0"
DEADLINE = 120.0
# ---------------------------------------------------------------------------

SOCKET_ENV = "RAILYARD_AGENT_SOCKET"
DEADLINE_ENV = "RAILYARD_DEADLINE"
GRACE_ENV = "RAILYARD_DEADLINE_GRACE"
DEFAULT_GRACE = 10.0
MARGIN = 5.0  # the worker's own exit after its grace, and scheduling slack
SO_PEERCRED = 17
INTERNAL = 999
TIMEOUT = 105


def _log(msg: str) -> None:
    try:
        posix.write(2, f"railyard {PLUGIN}: {msg}\n".encode(errors="replace"))
    except OSError:
        pass


def _env(name: str) -> str:
    value = posix.environ.get(name.encode())
    return value.decode(errors="surrogateescape") if value is not None else ""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[posix.write(fd, view) :]


def _version_doc() -> str:
    versions = ",".join(f'"{v}"' for v in SUPPORTED)
    return f'{{"cniVersion":"{CURRENT}","supportedVersions":[{versions}]}}\n'


def _seconds(name: str, default: float) -> float:
    try:
        value = float(_env(name) or default)
    except ValueError:
        return default
    return value if value >= 0 else default


def _direct_again(data: bytes, reason: str) -> NoReturn:
    """``_direct`` once stdin was read: the plugin gets ``data`` on fd 0."""
    try:
        fd = posix.memfd_create("railyard-stdin")
        _write_all(fd, data)
        posix.lseek(fd, 0, 0)
        posix.dup2(fd, 0)
        posix.close(fd)
    except OSError as exc:
        _fail(INTERNAL, "cannot run the plugin", f"{reason}; stdin: {exc}")
    _direct(reason)


def _direct(reason: str) -> NoReturn:
    """Exec the real plugin in this process; stdin is still unread."""
    _log(f"agent not used ({reason}); running the plugin directly")
    try:
        posix.execv(PYTHON, [PYTHON, "-I", "-c", DIRECT, *sys.argv[1:]])
    except OSError as exc:
        _fail(INTERNAL, "cannot run the plugin", f"exec {PYTHON}: {exc}")
    raise AssertionError("unreachable")  # execv does not return


def _fail(code: int, msg: str, details: str) -> NoReturn:
    """Print a CNI error document in the config's version and exit 1."""
    import json  # only on this path: it costs more than the whole happy path

    version = CURRENT
    try:
        conf = json.loads(_STDIN[0] or b"{}")
        if isinstance(conf, dict) and isinstance(conf.get("cniVersion"), str):
            version = conf["cniVersion"] or version
    except ValueError:
        pass
    doc = {"cniVersion": version, "code": code, "msg": msg}
    if details:
        doc["details"] = details
    _log(f"{msg}: {details}")
    _write_all(1, (json.dumps(doc) + "\n").encode())
    sys.exit(1)


_STDIN: list[bytes] = [b""]


def _frame(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


def _read_stdin() -> bytes:
    chunks = []
    while True:
        try:
            chunk = posix.read(0, 1 << 16)
        except OSError:  # closed stdin reads as empty input, as in the plugin
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _request(stdin: bytes, command: bytes = b"") -> bytes:
    argv = b"\0".join(a.encode(errors="surrogateescape") for a in sys.argv[1:])
    environ = dict(posix.environ)
    if command:
        environ[b"CNI_COMMAND"] = command
    env = b"\0".join(k + b"=" + v for k, v in environ.items())
    return b"".join(
        (
            _frame(b"P", PLUGIN.encode()),
            _frame(b"A", argv),
            _frame(b"V", env),
            _frame(b"I", stdin),
        )
    )


def _recv_exact(sock: _socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


_LOST: list[str] = []  # why stdout could not take the reply, if it could not
_HEARD: list[bool] = []  # not empty once the agent sent anything at all


def _relay(sock: _socket.socket, out: int = 1) -> tuple[int | None, bool]:
    """Copy the reply to stdout (``out``; -1 drops it) and stderr; the exit
    status, or None if cut short. A stdout that fails (full, closed) is noted
    in ``_LOST`` and the reply still read to its end."""
    printed = False
    while True:
        head = _recv_exact(sock, 5)
        if head is None:
            return None, printed
        _HEARD.append(True)
        kind, size = head[:1], int.from_bytes(head[1:], "big")
        payload = _recv_exact(sock, size) if size else b""
        if payload is None:
            return None, printed
        if kind == b"O":
            printed = printed or bool(payload)
            if out >= 0 and not _LOST:
                try:
                    _write_all(out, payload)
                except OSError as exc:
                    _LOST.append(str(exc))
        elif kind == b"E":
            try:
                _write_all(2, payload)
            except OSError:
                pass
        elif kind == b"X":
            return int.from_bytes(payload, "big", signed=True), printed


def _take_back(path: str, limit: float) -> None:
    """DEL through the agent an ADD whose result stdout could not take: the
    runtime never DELs an attachment it was not told about (``cni.skel``
    does the same in direct mode). Its output is dropped, its log relayed."""
    _log(f"ADD result could not be written ({_LOST[0]}); rolling back")
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        if limit:
            sock.settimeout(limit)
        sock.connect(path)
        sock.sendall(_request(_STDIN[0], b"DEL"))
        sock.shutdown(_socket.SHUT_WR)
        status, _ = _relay(sock, out=-1)
    except OSError as exc:
        _log(f"rolling back the undelivered ADD failed: {exc}")
        return
    finally:
        sock.close()
    _log(
        "undelivered ADD rolled back"
        if status == 0
        else f"rolling back the undelivered ADD failed (DEL exited {status})"
    )


def main() -> int:
    command = _env("CNI_COMMAND")
    if command == "VERSION" and not sys.argv[1:]:
        _write_all(1, _version_doc().encode())
        return 0
    path = _env(SOCKET_ENV) or SOCKET
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        _direct(f"{path}: {exc.strerror or exc}")
    cred = sock.getsockopt(_socket.SOL_SOCKET, SO_PEERCRED, 12)
    uid = int.from_bytes(cred[4:8], sys.byteorder)
    if uid not in (0, posix.geteuid()):
        sock.close()
        _direct(f"{path} is served by uid {uid}, not root")
    limit = _seconds(DEADLINE_ENV, DEADLINE)
    if limit:
        sock.settimeout(limit + _seconds(GRACE_ENV, DEFAULT_GRACE) + MARGIN)
    _STDIN[0] = _read_stdin()
    try:
        try:
            sock.sendall(_request(_STDIN[0]))
            sock.shutdown(_socket.SHUT_WR)
        except OSError as exc:
            # The agent may have answered (a refusal) before reading it all.
            _log(f"sending to railyard-agent at {path}: {exc}")
        status, printed = _relay(sock)
    except TimeoutError:
        _fail(TIMEOUT, "command timed out", f"no reply from railyard-agent at {path}")
    except OSError as exc:
        status, printed = None, False
        _log(f"railyard-agent at {path}: {exc}")
    if _LOST:
        if command == "ADD" and status == 0:
            _take_back(path, limit + _seconds(GRACE_ENV, DEFAULT_GRACE) + MARGIN)
        return 1
    if status is None and not _HEARD and command != "ADD":
        # Not a word back: a killed agent's listener still had this connection
        # in its backlog, or the worker died at once. Every command but ADD may
        # run twice, so it runs here instead of failing (a DEL failed for that
        # would make the runtime try again later, or give up and leak).
        sock.close()
        _direct_again(_STDIN[0], f"railyard-agent at {path} ended without a word")
    if status is None:
        if printed:
            return 1
        _fail(INTERNAL, "railyard-agent ended the request without a result", path)
    return status


def render(
    plugin: str,
    module: str,
    func: str,
    python: str,
    socket_path: str,
    interpreter: str = "/usr/bin/python3",
    direct_code: str = "",
) -> str:
    """This file as the installed shim for ``plugin``, values baked in.

    Direct mode runs ``module.func()`` (a console script's entry point), or
    ``direct_code`` when given (the simulated host's launchers).
    """
    direct = (
        direct_code or f"import sys; from {module} import {func}; sys.exit({func}())"
    )
    from pathlib import Path

    from cni import _version
    from cni import version as cni_version

    text = Path(__file__).read_text()
    head, sep, rest = text.partition("# ---- baked in by render()")
    _, sep2, tail = rest.partition("# " + "-" * 75 + "\n")
    if not (sep and sep2):
        raise RuntimeError("shim template markers missing")
    baked = (
        f"# ---- baked in by packaging/install.sh (railyard {_version.VERSION})\n"
        f"PLUGIN = {plugin!r}\n"
        f"DIRECT = {direct!r}\n"
        f"PYTHON = {python!r}\n"
        f"SOCKET = {socket_path!r}\n"
        f"SUPPORTED = {tuple(cni_version.ALL)!r}\n"
        f"CURRENT = {cni_version.CURRENT!r}\n"
        "DEADLINE = 120.0\n"
        "# " + "-" * 75 + "\n"
    )
    body = head + baked + tail
    # The installed shim ends without the interpreter's teardown (~2 ms of
    # every call: VERSION measured 12.1 ms against 10.3 ms); all it printed
    # went out unbuffered through posix.write. ``_fail`` still uses sys.exit.
    body = body.partition("\ndef render(")[0] + "\n\nposix._exit(main())\n"
    # The marker line lets the installers recognise their own files.
    mark = (
        f'# railyard-cni launcher for CNI type "{plugin}": a shim for railyard-agent\n'
    )
    return f"#!{interpreter} -IS\n" + mark + _launcher(plugin, body)


def _launcher(plugin: str, body: str) -> str:
    """``body`` compiled for the interpreter rendering it, and as source.

    A script has no cached bytecode: compiling this program costs ~2.5 ms on
    every exec, a sixth of VERSION. So the code object rides along marshalled
    (loading it: ~0.05 ms, the two literals' parsing ~0.5 ms), for the
    interpreter whose bytecode magic it carries (the venv's, which renders
    and runs the shims); any other interpreter compiles the source instead.
    The ``__future__`` import is compiled in as a flag, not as a runtime
    import of the module (another ~0.5 ms).
    """
    import __future__

    import importlib.util
    import marshal

    future = "from __future__ import annotations\n"
    code = compile(
        body.replace(future, "", 1),
        f"<railyard-cni {plugin} shim>",
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    return (
        "# Generated from cni/agent/shim.py: the program twice, compiled for the\n"
        "# interpreter that rendered it, and as source for any other one.\n"
        "import sys\n"
        "if sys.modules['_frozen_importlib_external'].MAGIC_NUMBER == "
        f"{importlib.util.MAGIC_NUMBER!r}:\n"
        f"    exec(__import__('marshal').loads({marshal.dumps(code)!r}))\n"
        f"exec(compile({body!r}, __file__, 'exec'))\n"
    )


if __name__ == "__main__":
    sys.exit(main())
