# SPDX-License-Identifier: Apache-2.0
"""The CNI plugin skeleton: env + stdin in, one JSON document on stdout out.

Does what Go ``pkg/skel`` does (SPEC.md "Parameters") with the
same codes and messages, so runtimes and their logs see no difference:

- env: ``required env variables [CNI_X,CNI_Y] missing`` (4) per command;
  ``unknown CNI_COMMAND: X`` (4). With no CNI_COMMAND at all the about string
  also goes to stderr; unlike Go skel (about text, exit 0) the result is still
  error 4 on stdout, as the spec requires.
  An empty CNI_CONTAINERID counts as missing (4), like Go's Getenv; code 3
  ``missing containerID`` is kept in ``validate_container_id`` for callers.
- container ID and ifname checks for ADD/CHECK/DEL -> 4 with Go's messages,
  made while reading the env (before stdin), in Go's order. Beyond Go: a
  CNI_* value that is not UTF-8, an ifname holding ``%`` (a kernel name
  template) or unprintable characters, a container ID longer than
  ``MAX_CONTAINER_ID`` -> 4; for ADD/CHECK an existing CNI_NETNS that is not
  a network namespace (a FIFO, a file) -> 4, checked without blocking.
- stdin (not read for VERSION): not a JSON object / wrong ``name`` type -> 6
  ``error unmarshall network config: ...``; no ``name`` -> 7 ``missing network
  name``; bad characters -> 7.
- versions: ``incompatible CNI versions`` (1, details ``config is "x", plugin
  supports ["a" "b"]``); CHECK below 0.4.0 and GC/STATUS below 1.1.0 -> 1
  ``config version does not allow CHECK`` (or GC/STATUS).
- ADD/CHECK/DEL whose CNI_NETNS is the plugin's own netns -> 8 unless
  CNI_NETNS_OVERRIDE is 1/true (inode compare with /proc/self/ns/net). Go
  checks ADD and DEL after calling the plugin; we check before, so nothing is
  ever done to the host's own interfaces.
- GC: ``cni.dev/valid-attachments`` (and the spec's earlier misspelling
  ``cni.dev/attachments``) parsed into ``CmdArgs.valid_attachments``. A GC
  config with neither key is refused (7): treating it as "nothing is valid"
  would tear down every attachment of the network.
- output: ADD prints the returned Result converted to the config's
  ``cniVersion``; ADD returning None prints ``prevResult`` (a pass-through
  chained plugin) or an empty result; CHECK/DEL/GC/STATUS print nothing.
  VERSION prints ``{"cniVersion", "supportedVersions"}``.
- errors: a CniError (or ``cni.ipam.IpamError``) becomes the spec's error JSON
  on stdout and exit 1; notes attached by ``cni.rollback`` (undo failures) are
  appended to ``details``. Any other exception becomes code 999 (libcni's
  ErrInternal) with its message; its traceback goes to the log file only
  (stderr gets one line), never stdout. The deadline (``cni.deadline``)
  becomes code 105.
- an ADD that finished but whose result cannot be delivered (building it
  failed, or stdout is full or closed) is rolled back by the plugin's DEL:
  the runtime never DELs an attachment it was not told about.
- ``-v``/``--version`` on the command line prints the about string to stdout.

Stdout is written once, at the end, through ``cni.deadline.OutputOnce``.

Cold start (runtimes such as podman exec VERSION before every ADD and DEL):
``run_plugin``/``main`` accept, instead of a ``PluginFuncs``, a function that
returns one, e.g. ``lambda: import_module("cni.plugins.x.commands").plugin_funcs()``;
it is called only once env and stdin passed the generic checks, so VERSION, -v
and env/decode errors never import the plugin's commands. ``main`` freezes the
garbage collector's view of the heap before the process exits: the
interpreter's final collection would otherwise walk every object pyroute2 and
grpc created at import (~60-100 ms here) for a process that is about to end.

Imports the standard library and cni's own light modules only: a VERSION or a
config error must never load pyroute2, grpc, sqlalchemy or click
(``tests/test_import_hygiene.py``). ``cni.types``, ``cni.ipam`` and ``cni.args``
are imported where they are first needed (a VERSION needs none of them).
"""

from __future__ import annotations

import gc
import io
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, TypeGuard

from cni import deadline as _deadline
from cni import logs
from cni import version as _version
from cni.errors import (
    DECODE_FAILURE,
    INCOMPATIBLE_VERSION,
    INTERNAL,
    INVALID_CONFIG,
    INVALID_ENV,
    INVALID_NETNS,
    IO_FAILURE,
    UNKNOWN_CONTAINER,
    CniError,
)

if TYPE_CHECKING:
    from cni.args import CniArgs
    from cni.ipam import Attachment, IpamError
    from cni.types import NetConf, Result

log = logging.getLogger(__name__)

COMMANDS = ("ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION")
ALL = _version.ALL

# Go pkg/utils: cniValidNameChars.
_VALID_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")
_MAX_IFNAME = 15
#: The record of an attachment is the file ``<containerID>-<ifname>.json``,
#: written through a ``.<name>.<random>.tmp`` sibling: with a 15-byte ifname
#: both must fit the 255-byte file name limit. Runtimes use 64 hex digits.
MAX_CONTAINER_ID = 200

# Which CNI_* must be non-empty per command, in Go skel's order (1.1); a
# present value is validated right away for the commands that need it, so an
# invalid container ID is reported before a later missing variable, as in Go.
_ENV_RULES: tuple[tuple[str, frozenset[str], Callable[[str], None] | None], ...]
_ATTACHMENT_CMDS = frozenset({"ADD", "CHECK", "DEL"})
_UTF8_ENV = (
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_ARGS",
    "CNI_PATH",
)
#: Network names end up in records, ipamd rows and log lines; Kubernetes
#: object names (a NetworkAttachmentDefinition's) stop at 253.
MAX_NETWORK_NAME = 253


VALID_ATTACHMENTS_KEY = "cni.dev/valid-attachments"
_OLD_ATTACHMENTS_KEY = "cni.dev/attachments"  # SPEC 1.1.0 typo, still sent by libcni


# ---------------------------------------------------------------- records


@dataclass(slots=True)
class CmdArgs:
    """One invocation: the CNI_* env, the raw stdin and its parsed JSON."""

    command: str
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: str = ""  # raw CNI_ARGS
    path: list[str] = field(default_factory=list)  # CNI_PATH split on ':'
    stdin_data: bytes = b""
    netconf: dict[str, Any] = field(default_factory=dict)
    netns_override: bool = False
    #: The whole environment the plugin got (delegated IPAM gets it verbatim).
    env: Mapping[str, str] = field(default_factory=dict)
    #: GC only: the attachments the runtime still holds.
    valid_attachments: list[Attachment] = field(default_factory=list)
    _conf: NetConf | None = field(default=None, init=False, repr=False, compare=False)
    _cni_args: CniArgs | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def cni_version(self) -> str:
        """The config's cniVersion (0.1.0 when absent)."""
        return _version.config_version(self.netconf)

    @property
    def conf(self) -> NetConf:
        """The common NetConf fields, parsed once (CniError 6/7 when malformed)."""
        if self._conf is None:
            from cni.types import NetConf

            self._conf = NetConf.from_dict(self.netconf)
        return self._conf

    @property
    def cni_args(self) -> CniArgs:
        """CNI_ARGS parsed with Go LoadArgs semantics (CniError 2 on unknown keys)."""
        if self._cni_args is None:
            from cni.args import parse_cni_args

            self._cni_args = parse_cni_args(self.args)
        return self._cni_args

    def is_valid_attachment(self, container_id: str, ifname: str) -> bool:
        """GC helper: is (container_id, ifname) in ``cni.dev/valid-attachments``?"""
        from cni.ipam import Attachment

        return Attachment(container_id, ifname) in self.valid_attachments


AddFunc = Callable[[CmdArgs], "Result | None"]
CheckFunc = Callable[[CmdArgs], "Result | None"]
VoidFunc = Callable[[CmdArgs], None]
#: What ``run_plugin`` accepts instead of ``PluginFuncs`` to load them late.
FuncsFactory = Callable[[], "PluginFuncs"]


@dataclass(frozen=True, slots=True)
class PluginFuncs:
    """The plugin's command functions (Go ``skel.CNIFuncs``).

    ``add`` returns the Result to print (a chained plugin returns its possibly
    modified prevResult) or None to pass prevResult through. ``check`` may
    return a Result, which is ignored. A missing ``check``/``status``/``gc``
    succeeds without doing anything.
    """

    add: AddFunc
    del_: VoidFunc
    check: CheckFunc | None = None
    status: VoidFunc | None = None
    gc: VoidFunc | None = None


# ------------------------------------------------------------ validation


def validate_container_id(container_id: str) -> None:
    """Go ``utils.ValidateContainerID``: 3 when empty, 4 on bad characters."""
    if container_id == "":
        raise CniError(UNKNOWN_CONTAINER, "missing containerID")
    if not _VALID_NAME.fullmatch(container_id):
        raise CniError(
            INVALID_ENV, "invalid characters in containerID", _shown(container_id)
        )
    if len(container_id) > MAX_CONTAINER_ID:  # ASCII only by now
        raise CniError(
            INVALID_ENV,
            "containerID is too long",
            f"{len(container_id)} characters, at most {MAX_CONTAINER_ID}",
        )


def validate_network_name(name: str) -> None:
    """Go ``utils.ValidateNetworkName`` (code 7)."""
    if name == "":
        raise CniError(INVALID_CONFIG, "missing network name")
    # fullmatch: "$" would also accept a trailing newline (Go's does not).
    if not _VALID_NAME.fullmatch(name):
        raise CniError(
            INVALID_CONFIG, "invalid characters found in network name", _shown(name)
        )
    if len(name) > MAX_NETWORK_NAME:
        raise CniError(
            INVALID_CONFIG,
            "network name is too long",
            f"{len(name)} characters, at most {MAX_NETWORK_NAME}",
        )


def validate_ifname(ifname: str) -> None:
    """Go ``utils.ValidateInterfaceName`` (code 4, Go's messages)."""
    if ifname == "":
        raise CniError(INVALID_ENV, "interface name is empty")
    # Go counts bytes (len of a string), not characters.
    if len(ifname.encode()) > _MAX_IFNAME:
        raise CniError(
            INVALID_ENV,
            "interface name is too long",
            f"interface name should be less than {_MAX_IFNAME + 1} characters",
        )
    if ifname in (".", ".."):
        raise CniError(INVALID_ENV, "interface name is . or ..")
    if any(c in "/:" or c.isspace() for c in ifname):
        raise CniError(
            INVALID_ENV, "interface name contains / or : or whitespace characters"
        )
    # The kernel reads a name holding "%" as a template ("net%d" -> the first
    # free net0, net1, ...): the VF would land under a name DEL cannot know.
    if "%" in ifname:
        raise CniError(INVALID_ENV, "interface name contains %", _shown(ifname))
    if not ifname.isprintable():
        raise CniError(
            INVALID_ENV, "interface name contains unprintable characters", repr(ifname)
        )


def _shown(value: str) -> str:
    """A hostile value for a message: escapes visible, cut for a log line."""
    text = value if value.isprintable() else ascii(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _require_utf8(name: str, value: str) -> None:
    """os.environ decodes undecodable bytes to lone surrogates: refuse them
    here, before they reach a path, a record or a log line (all UTF-8)."""
    try:
        value.encode()
    except UnicodeEncodeError:
        raise CniError(
            INVALID_ENV, f"{name} is not valid UTF-8", _shown(value)
        ) from None


def check_netns(netns: str) -> None:
    """ADD/CHECK: an existing CNI_NETNS must be a network namespace (code 4).

    ``open_netns`` opens it non-blocking, so a FIFO or a device cannot hang
    the plugin, and asks its namespace type. A path that does not exist is
    left to the plugin, which reports the missing netns in its own words.
    """
    import errno

    from cni.kernel import NetnsNotFound, NotANetns
    from cni.kernel.netns import open_netns

    try:
        os.close(open_netns(netns))
    except NotANetns:
        raise CniError(
            INVALID_ENV, "CNI_NETNS is not a network namespace", _shown(netns)
        ) from None
    except NetnsNotFound as e:
        if e.errno == errno.ENOENT:
            return
        raise CniError(
            INVALID_ENV,
            "CNI_NETNS cannot be opened",
            f"{_shown(netns)}: {os.strerror(e.errno or 0)}",
        ) from None


_ENV_RULES = (
    ("CNI_COMMAND", frozenset(COMMANDS), None),
    ("CNI_CONTAINERID", _ATTACHMENT_CMDS, validate_container_id),
    ("CNI_NETNS", frozenset({"ADD", "CHECK"}), None),
    ("CNI_IFNAME", _ATTACHMENT_CMDS, validate_ifname),
    ("CNI_PATH", frozenset({"ADD", "CHECK", "DEL", "GC", "STATUS"}), None),
)


def is_own_netns(netns: str) -> bool:
    """True when ``netns`` is the namespace this process runs in.

    Compares (st_dev, st_ino) with /proc/self/ns/net like Go ``ns.CheckNetNS``;
    a path that cannot be stat'ed is "not ours" and left to the plugin (DEL
    tolerates a vanished netns).
    """
    if not netns:
        return False
    try:
        theirs = os.stat(netns)
        ours = os.stat("/proc/self/ns/net")
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def _decode_netconf(data: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise CniError(DECODE_FAILURE, f"error unmarshall network config: {e}") from e
    if not isinstance(obj, dict):
        raise CniError(
            DECODE_FAILURE,
            "error unmarshall network config: "
            f"cannot unmarshal {type(obj).__name__} into an object",
        )
    name = obj.get("name", "")
    if name is None:
        name = ""
    if not isinstance(name, str):
        raise CniError(
            DECODE_FAILURE,
            "error unmarshall network config: "
            f"field name must be a string, got {type(name).__name__}",
        )
    validate_network_name(name)
    return obj


def parse_valid_attachments(conf: Mapping[str, Any]) -> list[Attachment]:
    """``cni.dev/valid-attachments`` -> Attachments (CniError 7 if malformed)."""
    from cni.ipam import Attachment

    key = (
        VALID_ATTACHMENTS_KEY if VALID_ATTACHMENTS_KEY in conf else _OLD_ATTACHMENTS_KEY
    )
    if key not in conf:
        raise CniError(
            INVALID_CONFIG,
            f"GC config lacks {VALID_ATTACHMENTS_KEY}",
            "refusing to garbage-collect without the list of valid attachments",
        )
    raw = conf[key]
    if raw is None:  # libcni marshals an empty Go slice as null
        return []
    if not isinstance(raw, list):
        raise CniError(
            INVALID_CONFIG, f"invalid {key}", f"expected a list, got {raw!r}"
        )
    out: list[Attachment] = []
    for item in raw:
        if not isinstance(item, Mapping):
            raise CniError(INVALID_CONFIG, f"invalid {key}", f"bad entry {item!r}")
        cid, ifname = item.get("containerID"), item.get("ifname")
        if not isinstance(cid, str) or not isinstance(ifname, str):
            raise CniError(
                INVALID_CONFIG,
                f"invalid {key}",
                f"entry needs string containerID and ifname: {item!r}",
            )
        out.append(Attachment(cid, ifname))
    return out


# ---------------------------------------------------------------- output


def _error_doc(err: CniError, cni_version: str) -> str:
    return json.dumps(err.to_json(cni_version), indent=4) + "\n"


def _result_doc(result: Result, cni_version: str) -> str:
    # Go types.PrintResult: MarshalIndent with four spaces.
    return json.dumps(result.to_json(cni_version), indent=4) + "\n"


def _is_ipam_error(exc: BaseException) -> TypeGuard[IpamError]:
    if isinstance(exc, CniError):
        return False  # the common error needs no import to classify
    from cni.ipam import IpamError

    return isinstance(exc, IpamError)


def _as_cni_error(exc: BaseException) -> CniError:
    if isinstance(exc, CniError):
        err = exc
    elif _is_ipam_error(exc):
        err = CniError(exc.code, exc.msg, exc.details)
    elif isinstance(exc, _deadline.DeadlineExceeded):
        err = exc.to_cni_error()
    else:
        err = CniError(INTERNAL, str(exc) or type(exc).__name__, type(exc).__name__)
    notes = getattr(exc, "__notes__", None)
    if notes:
        extra = "; ".join(str(n) for n in notes)
        if extra not in err.details:
            err = CniError(
                err.code, err.msg, f"{err.details}; {extra}" if err.details else extra
            )
    return err


# --------------------------------------------------------------- dispatch


class _Done(Exception):
    """Internal: the command finished and produced ``doc`` (maybe empty)."""

    def __init__(self, doc: str) -> None:
        self.doc = doc


def _env_cmd_args(env: Mapping[str, str]) -> CmdArgs:
    cmd = env.get("CNI_COMMAND", "")
    missing: list[str] = []
    for name in _UTF8_ENV:
        _require_utf8(name, env.get(name, ""))
    for name, needed_by, validate in _ENV_RULES:
        value = env.get(name, "")
        if value == "":
            if cmd in needed_by or name == "CNI_COMMAND":
                missing.append(name)
        elif validate is not None and cmd in needed_by:
            validate(value)
    if missing:
        raise CniError(
            INVALID_ENV, f"required env variables [{','.join(missing)}] missing"
        )
    override = env.get("CNI_NETNS_OVERRIDE", "")
    return CmdArgs(
        command=cmd,
        container_id=env.get("CNI_CONTAINERID", ""),
        netns=env.get("CNI_NETNS", ""),
        ifname=env.get("CNI_IFNAME", ""),
        args=env.get("CNI_ARGS", ""),
        path=[p for p in env.get("CNI_PATH", "").split(os.pathsep) if p],
        netns_override=override.upper() == "TRUE" or override == "1",
        env=dict(env),
    )


def _require_since(
    cmd: str, conf_version: str, since: str, supported: Sequence[str]
) -> None:
    try:
        ok = _version.greater_than_or_equal(conf_version, since)
    except ValueError as e:
        raise CniError(DECODE_FAILURE, str(e)) from e
    if not ok:
        raise CniError(INCOMPATIBLE_VERSION, f"config version does not allow {cmd}")
    if not any(_version.greater_than_or_equal(v, conf_version) for v in supported):
        raise CniError(INCOMPATIBLE_VERSION, f"plugin version does not allow {cmd}")


def _dispatch(
    ca: CmdArgs,
    funcs: PluginFuncs | FuncsFactory,
    supported: Sequence[str],
    stdin: IO[bytes] | IO[str],
    setup: Callable[[CmdArgs], None],
    undo: list[Callable[[], None]],
) -> str:
    """Validate, run the command, return the document to print ("" = none).

    A successful ADD appends to ``undo`` the DEL that takes it back, for when
    its result cannot be delivered.
    """
    cmd = ca.command
    if cmd == "VERSION":
        # Go encodes with json.Encoder: compact plus a newline; stdin ignored.
        return (
            json.dumps(_version.version_info(supported), separators=(",", ":")) + "\n"
        )
    try:
        data = stdin.read()
    except OSError as e:
        raise CniError(IO_FAILURE, f"error reading from stdin: {e}") from e
    ca.stdin_data = data.encode() if isinstance(data, str) else data
    ca.netconf = _decode_netconf(ca.stdin_data)
    setup(ca)  # logging from logLevel/logFile, context for the deadline
    if cmd not in COMMANDS:  # Go checks this only after decoding stdin
        raise CniError(INVALID_ENV, f"unknown CNI_COMMAND: {cmd}")
    try:
        conf_version = ca.cni_version
        _version.parse(conf_version)
    except ValueError as e:
        raise CniError(DECODE_FAILURE, str(e)) from e
    if cmd == "CHECK":
        _require_since(cmd, conf_version, _version.CHECK_SINCE, supported)
    elif cmd in ("GC", "STATUS"):
        _require_since(cmd, conf_version, _version.GC_SINCE, supported)
    _version.check_compatible(conf_version, supported)
    # Go skel checks this for ADD and DEL *after* the plugin ran; checking first
    # (and for CHECK too) means nothing is ever done to the plugin's own netns.
    if cmd in _ATTACHMENT_CMDS and not ca.netns_override and is_own_netns(ca.netns):
        raise CniError(
            INVALID_NETNS,
            "plugin's netns and netns from CNI_NETNS should not be the same",
        )
    if cmd in ("ADD", "CHECK") and ca.netns:
        check_netns(ca.netns)
    log.debug("%s config: %s", cmd, ca.stdin_data.decode(errors="replace"))
    if not isinstance(funcs, PluginFuncs):
        funcs = funcs()  # the plugin's commands module loads only now
    if cmd == "ADD":
        result = funcs.add(ca)
        undo.append(lambda: funcs.del_(ca))
        if result is None:
            prev = ca.conf.prev_result
            if prev is None:
                from cni.types import Result

                prev = Result(cni_version=conf_version)
            result = prev
        return _result_doc(result, conf_version)
    if cmd == "DEL":
        funcs.del_(ca)
    elif cmd == "CHECK":
        if funcs.check is not None:
            funcs.check(ca)
    elif cmd == "STATUS":
        if funcs.status is not None:
            funcs.status(ca)
    elif cmd == "GC":
        ca.valid_attachments = parse_valid_attachments(ca.netconf)
        if funcs.gc is not None:
            funcs.gc(ca)
    return ""


def run_plugin(
    funcs: PluginFuncs | FuncsFactory,
    about: str,
    supported_versions: Sequence[str] = ALL,
    env: Mapping[str, str] | None = None,
    stdin: IO[bytes] | IO[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    deadline_seconds: float | Mapping[str, float] | None = _deadline.DEFAULT_SECONDS,
    argv: Sequence[str] | None = None,
    plugin_name: str = "",
) -> int:
    """Run one CNI command; return the process exit code (0 ok, 1 error).

    Args:
        funcs: the plugin's command functions, or a function returning them,
            called only when a command is about to run (not for VERSION, -v
            or an env/stdin/version error), so those never import the
            plugin's commands module.
        about: printed for ``-v``/``--version`` and when CNI_COMMAND is unset.
        supported_versions: spec versions the plugin accepts (default ``ALL``).
        env, stdin, stdout, stderr: default to the process's own; tests pass
            a dict and StringIO/BytesIO to run the whole plugin in-process.
        deadline_seconds: hard deadline (``cni.deadline``), or a mapping of
            command -> seconds; env ``RAILYARD_DEADLINE`` overrides it; None
            disables.
        argv: command-line arguments; defaults to ``sys.argv[1:]`` only when
            ``env`` is None (so an in-process caller's argv is never read).
        plugin_name: shown in log lines (e.g. ``sriov``).
    """
    proc_mode = env is None
    env = os.environ if env is None else env
    if stdin is None:
        # A runtime may exec us with stdin closed; that reads as empty input.
        stdin = sys.stdin.buffer if sys.stdin is not None else io.BytesIO(b"")
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    if argv is None:
        argv = sys.argv[1:] if proc_mode else ()
    if any(a in ("-v", "--version") for a in argv):
        _print_about(stdout, about, supported_versions)
        return 0

    out = _deadline.OutputOnce(stdout)
    session = _Session(env, stderr, plugin_name)
    try:
        timer = _deadline.Deadline(
            _deadline.resolve_seconds(deadline_seconds, env, session.command),
            session.command,
            out,
            session.render,
            grace=_deadline.resolve_grace(env),
        )
        undo: list[Callable[[], None]] = []
        try:
            with timer:
                doc = _command_doc(
                    env, funcs, about, supported_versions, stdin, stderr, session, undo
                )
                timer.disarm()
            code = 0
        except BaseException as exc:  # noqa: BLE001 - every failure must become JSON
            timer.disarm()
            doc, code = session.render(_reported(exc, session.command)), 1
        return _deliver(doc, code, undo, out, stdout, env, proc_mode)
    finally:
        session.close()


def _print_about(stdout: IO[str], about: str, supported: Sequence[str]) -> None:
    stdout.write(about + "\n")
    stdout.write(f"CNI protocol versions supported: {', '.join(supported)}\n")
    stdout.flush()


class _Session:
    """One command's logging and reply version: stderr at first, then the
    netconf's ``logLevel``/``logFile``, and its ``cniVersion`` for errors."""

    def __init__(self, env: Mapping[str, str], stderr: IO[str], plugin: str) -> None:
        self.command = env.get("CNI_COMMAND", "")
        self.version = _version.CURRENT
        self._stderr = stderr
        self._ctx = logs.LogContext(plugin=plugin, command=self.command)
        self._setup = logs.configure(stderr=stderr, ctx=self._ctx)

    def adopt(self, ca: CmdArgs) -> None:
        """Follow the netconf: its version for errors, its log level and file."""
        conf = ca.netconf
        raw_version = conf.get("cniVersion")
        if isinstance(raw_version, str) and raw_version:
            self.version = raw_version
        level, log_file = conf.get("logLevel", ""), conf.get("logFile", "")
        self._ctx.container_id, self._ctx.ifname = ca.container_id, ca.ifname
        if (level or log_file) and isinstance(level, str) and isinstance(log_file, str):
            self._setup.close()
            self._setup = logs.configure(
                level, log_file, stderr=self._stderr, ctx=self._ctx
            )

    def render(self, err: CniError) -> str:
        return _error_doc(err, self.version)

    def close(self) -> None:
        self._setup.close()


def _command_doc(
    env: Mapping[str, str],
    funcs: PluginFuncs | FuncsFactory,
    about: str,
    supported: Sequence[str],
    stdin: IO[bytes] | IO[str],
    stderr: IO[str],
    session: _Session,
    undo: list[Callable[[], None]],
) -> str:
    """Read the env, run the command; the document to print ("" = none)."""
    try:
        ca = _env_cmd_args(env)
    except CniError as e:
        if e.code == INVALID_ENV and session.command == "" and about:
            # A human ran the binary by hand: tell them what it is (Go
            # skel does this and exits 0; the spec wants error 4).
            _print_about(stderr, about, supported)
        raise
    return _dispatch(ca, funcs, supported, stdin, session.adopt, undo)


def _reported(exc: BaseException, command: str) -> CniError:
    """The error JSON's content for ``exc``, logged once with what helps."""
    err = _as_cni_error(exc)
    command = command or "command"
    if isinstance(exc, CniError) or _is_ipam_error(exc):
        log.error("%s failed: %s", command, err)
    elif isinstance(exc, _deadline.DeadlineExceeded):
        # The traceback shows where the command was stuck.
        log.error("%s: %s", command, exc, exc_info=exc)
    else:
        log.error("%s failed unexpectedly: %s", command, err, exc_info=exc)
    return err


def _deliver(
    doc: str,
    code: int,
    undo: list[Callable[[], None]],
    out: _deadline.OutputOnce,
    stdout: IO[str],
    env: Mapping[str, str],
    proc_mode: bool,
) -> int:
    """Print the one document; take back an ADD whose result is not delivered."""
    if code != 0 and undo:
        # ADD finished but its result could not be made (conversion, the
        # deadline): the runtime sees an error and will not DEL.
        _take_back(RuntimeError("the result could not be built"), undo, env)
    if not doc:
        return code
    try:
        out.write(doc)
    except (OSError, ValueError) as exc:  # ValueError: stdout closed
        if code == 0:
            _take_back(exc, undo, env)
        else:
            log.error("cannot write the error to stdout: %s", exc)
        _discard_stdout(stdout, proc_mode)
        return 1
    return code


def _take_back(
    why: BaseException,
    undo: list[Callable[[], None]],
    env: Mapping[str, str],
) -> None:
    """Roll back a finished ADD whose success the runtime will never see.

    A runtime that got an error, or no answer at all (stdout full or closed),
    does not DEL an attachment it was not told about: the VF and its address
    would stay until GC. Run under DEL's deadline, in-process (stage 2 of the
    deadline does not kill a process that already has its answer).
    """
    log.error("ADD finished but its result cannot be delivered (%s): rolling back", why)
    seconds = _deadline.resolve_seconds(_deadline.DEFAULT_SECONDS, env, "DEL")
    timer = _deadline.Deadline(
        seconds,
        "DEL",
        _deadline.OutputOnce(io.StringIO()),
        lambda err: "",
        grace=_deadline.resolve_grace(env),
        hard_exit=lambda _code: None,
    )
    try:
        with timer:
            while undo:
                undo.pop()()
    except BaseException as e:  # noqa: BLE001 - reported, never raised
        log.error("rolling back the undelivered ADD failed: %s", _as_cni_error(e))
    else:
        log.info("undelivered ADD rolled back")


def _discard_stdout(stdout: IO[str], proc_mode: bool) -> None:
    """Point fd 1 at /dev/null so the interpreter's last flush of the text
    still buffered cannot fail again and print a traceback at exit."""
    if not proc_mode:
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stdout.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass


def main(funcs: PluginFuncs | FuncsFactory, about: str, **kwargs: Any) -> None:
    """``sys.exit(run_plugin(...))`` for a plugin's ``__main__``.

    The result is printed and the logs closed by then; freezing the heap makes
    the interpreter's last garbage collection skip every object alive now (all
    of them would be freed by the exit anyway), see the module doc.
    """
    code = run_plugin(funcs, about, **kwargs)
    gc.freeze()
    sys.exit(code)
