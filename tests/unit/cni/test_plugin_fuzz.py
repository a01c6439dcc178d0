# SPDX-License-Identifier: Apache-2.0
"""Fuzzing every plugin's door: netconf and env for ADD, DEL, CHECK and GC.

Each example runs the plugin's production entry (``cni.skel.run_plugin`` over
the plugin's ``plugin_funcs``) in-process on a fresh fake-kernel node
(``tests.unit.cni.attach.node``): a valid netconf with some fields replaced by
what a careless operator or an attacker writes (NaN, Infinity, 2**64,
negatives, booleans for numbers, paths for names, wrong types, deep
objects), env values the same way (templates and paths as ifnames, long and
non-UTF-8 IDs, FIFOs and files as netns, garbage CNI_ARGS), sometimes raw
bytes on stdin. Then the runtime's DEL with the same input, as a runtime
does after a failed or a finished ADD. Every example must end:

- with exit status 0 and a valid result (ADD) or nothing (other commands), or
  exit status 1 and exactly one CNI error document whose code is not 999;
- with no traceback on stderr;
- with nothing left: every VF home under its name and as it was, the pod
  netns holding only its own ``eth0``, no allocation, no file in the state
  dir (locks aside).

The IPAM is the node's in-memory one behind the real ``choose_ipam``: ipamd
types build the real gRPC client first (so ``ipam.timeout``, ``ipam.socket``
and ``ipam.endpoints`` are validated as in production) and then talk to the
fake; other types are the real delegated IPAM over a CNI_PATH with nothing in
it.

``CORPUS`` holds issue 10's table as fixed examples, run on every CI run.

Budget: the ``quick`` profile (default: 15 derandomized examples per plugin
and command) keeps a developer's unit tier short; ``./dev test`` (CI) runs the
``ci`` profile (``RAILYARD_FUZZ_PROFILE=ci``: 60, a few seconds each, the
module well under a minute); ``RAILYARD_FUZZ_PROFILE=soak`` runs 2,000 random
examples per test, and ``RAILYARD_FUZZ_EXAMPLES=N`` sets another count:

    RAILYARD_FUZZ_EXAMPLES=500 .venv/bin/python -m pytest -q -p no:cacheprovider \\
        tests/unit/cni/test_plugin_fuzz.py
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cni.ipam.choose import IPAMD_TYPES, ipam_type
from cni.plugins.registry import plugin
from cni.skel import run_plugin
from tests.doubles.fake_ipam import FakeIpam
from tests.unit.cni.attach.node import Node

settings.register_profile(
    "plugin-ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
settings.register_profile(
    "plugin-quick", settings.get_profile("plugin-ci"), max_examples=15
)
settings.register_profile(
    "plugin-soak",
    max_examples=2000,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
_PROFILE = {"soak": "plugin-soak", "ci": "plugin-ci"}.get(
    os.environ.get("RAILYARD_FUZZ_PROFILE", ""), "plugin-quick"
)
FUZZ = settings.get_profile(_PROFILE)
if os.environ.get("RAILYARD_FUZZ_EXAMPLES"):
    FUZZ = settings(FUZZ, max_examples=int(os.environ["RAILYARD_FUZZ_EXAMPLES"]))

SHM = Path("/dev/shm")
PLUGINS = ("sriov", "ib-sriov", "rdma", "railyard-ipam")
COMMANDS = ("ADD", "DEL", "CHECK", "GC")

# ----------------------------------------------------------------- world


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


class World:
    """One fresh node, its pod, and the runner of the plugin under test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.node = Node(root)
        self.pod = self.node.pod()
        self.fifo = root / "fifo"
        os.mkfifo(self.fifo)
        self.plain = root / "plain"
        self.plain.write_text("not a netns\n")
        self.empty_bin = root / "cni-bin"
        self.empty_bin.mkdir()
        vfs = [*self.node.roce.vfs, *self.node.ib.vfs]
        self.vfs = vfs
        self.before = {vf.pci: self.node.snapshot(vf) for vf in vfs}
        self.cni_type = ""

    def make_ipam(self, netconf: Mapping[str, Any], env: Mapping[str, str]) -> Any:
        """Production's choice of IPAM, with the node's fake behind ipamd."""
        from cni.ipam.choose import choose_ipam
        from cni.ipam.grpc_client import IpamdClient

        if self.cni_type == "railyard-ipam":
            # That binary is the ipamd client itself, whatever ipam.type says.
            IpamdClient.from_netconf(netconf, env).close()
            return self.node.ipam
        kind = ipam_type(netconf)
        if not kind:
            return self.node.ipam if netconf.get("ipam") else None
        real = choose_ipam(netconf, env)
        if kind in IPAMD_TYPES:
            assert real is not None
            real.close()  # built for its validation only; no call goes out
            return self.node.ipam
        return real

    def run(self, cni_type: str, env: dict[str, str], stdin: bytes) -> Outcome:
        self.cni_type = cni_type
        funcs = plugin(cni_type).funcs(
            lambda _ca: self.node.kernel.deps(self.node.state_dir), self.make_ipam
        )
        out, err = io.StringIO(), io.StringIO()
        code = run_plugin(
            funcs,
            f"railyard {cni_type} fuzz",
            env=env,
            stdin=io.BytesIO(stdin),
            stdout=out,
            stderr=err,
            deadline_seconds=60,
            plugin_name=cni_type,
        )
        return Outcome(code, out.getvalue(), err.getvalue())

    def base_env(self) -> dict[str, str]:
        return {
            **self.node.env,
            "CNI_CONTAINERID": "c1",
            "CNI_NETNS": self.pod,
            "CNI_IFNAME": "net1",
            "CNI_PATH": str(self.empty_bin),
            # ipamd's default socket is the machine's; the client validates
            # the one it is given (no call goes out), so give it ours.
            "RAILYARD_IPAMD_SOCKET": str(self.root / "ipamd.sock"),
        }

    def assert_nothing_left(self) -> None:
        node = self.node
        for vf in self.vfs:
            assert node.snapshot(vf) == self.before[vf.pci], f"VF {vf.pci} not home"
        assert node.kernel.link_names(self.pod) == ["eth0"]
        assert node.ipam.held == {}, node.ipam.held
        assert node.records() == []
        assert list((self.root / "cwd").iterdir()) == []


@contextmanager
def world() -> Iterator[World]:
    base = SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else None
    root = Path(tempfile.mkdtemp(prefix="ry-fuzz-", dir=base))
    # The plugins run in a scratch directory that must stay empty: a relative
    # path taken from the netconf (a logFile) would land there.
    cwd = os.getcwd()
    (root / "cwd").mkdir()
    os.chdir(root / "cwd")
    try:
        yield World(root)
    finally:
        os.chdir(cwd)
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------- configs


def valid_conf(w: World, cni_type: str, command: str) -> dict[str, Any]:
    node = w.node
    if cni_type == "sriov":
        conf = node.sriov_conf()
    elif cni_type == "ib-sriov":
        conf = node.ib_conf()
    elif cni_type == "rdma":
        conf = node.rdma_conf()
    else:
        conf = {
            "cniVersion": "1.0.0",
            "name": "rail1",
            "type": "railyard-ipam",
            "ipam": {"type": "railyard-ipam", "default_ipv4_ippool": ["rail1-v4"]},
        }
    if command == "GC":
        conf["cniVersion"] = "1.1.0"
        conf["cni.dev/valid-attachments"] = []
    return conf


HOSTILE_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**64, 2**32, -1, 0, 65536, 4096, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=24),
    st.sampled_from(
        [
            "",
            "%d",
            "net%d",
            "../../../bin/true",
            "/bin/true",
            "/dev/full",
            "/dev/zero",
            "dhcp",
            "host-local",
            "on",
            "off",
            "auto",
            "enable",
            "0x7fff",
            "02:00:00:00:00:01",
            "02:00:00:00:00:00:00:01",
            "\x00",
            "\ud800",
            "a" * 300,
            "1.1.0",
            "99.0.0",
            "railyard",
            "spiderpool",
        ]
    ),
)
HOSTILE = st.recursive(
    HOSTILE_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=8), inner, max_size=3),
    ),
    max_leaves=6,
)

TOP_KEYS = [
    "cniVersion",
    "name",
    "type",
    "deviceID",
    "pciBusID",
    "mtu",
    "vlan",
    "vlanQoS",
    "vlanProto",
    "spoofchk",
    "trust",
    "link_state",
    "min_tx_rate",
    "max_tx_rate",
    "mac",
    "pkey",
    "logLevel",
    "logFile",
    "runtimeConfig",
    "args",
    "ipam",
    "prevResult",
    "capabilities",
    "rdmaIsolation",
    "detectIPConflict",
    "detectGateway",
    "detectionWindowMs",
    "policyRouting",
    "routeTable",
    "rulePriority",
    "podDefaultRouteNIC",
    "enableRdma",
    "ibKubernetesEnabled",
    "vfioPciMode",
    "cni.dev/valid-attachments",
]
IPAM_KEYS = [
    "type",
    "socket",
    "endpoints",
    "timeout",
    "default_ipv4_ippool",
    "default_ipv6_ippool",
    "sticky",
    "tls_ca",
]


@st.composite
def mutated_conf(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    conf = json.loads(json.dumps(base))
    # Mostly zero or one change, so that many examples get past the config
    # checks into the lifecycle, where a half-done ADD could leave something.
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2, 3]))):
        where = draw(st.sampled_from(["top", "ipam", "runtimeConfig"]))
        if where == "top":
            key = draw(st.sampled_from(TOP_KEYS))
            target = conf
        elif where == "ipam":
            if not isinstance(conf.get("ipam"), dict):
                continue
            key = draw(st.sampled_from(IPAM_KEYS))
            target = conf["ipam"]
        else:
            rc = conf.setdefault("runtimeConfig", {})
            if not isinstance(rc, dict):
                continue
            key = draw(st.sampled_from(["mac", "ips", "deviceID", "infinibandGUID"]))
            target = rc
        if draw(st.booleans()) and key in target:
            del target[key]
        else:
            target[key] = draw(HOSTILE)
    return conf


def env_value(w: World, name: str) -> st.SearchStrategy[str]:
    common = st.sampled_from(
        ["", "%d", "..", "a b", "x" * 16, "x" * 300, "n:1", "a/b", "net1\n"]
    )
    surrogate = st.just(os.fsdecode(b"n\xff\xfe"))
    if name == "CNI_NETNS":
        return st.one_of(
            st.just(w.pod),
            st.just(str(w.fifo)),
            st.just(str(w.plain)),
            st.just("/var/run/netns/none"),
            st.just(str(w.root)),
            common,
            surrogate,
        )
    if name == "CNI_ARGS":
        return st.one_of(
            st.just("IgnoreUnknown=1;K8S_POD_NAME=p;K8S_POD_NAMESPACE=ns"),
            st.just("IP=10.0.0.1;MAC=zz"),
            st.just("IgnoreUnknown=maybe"),
            st.text(max_size=30),
            surrogate,
        )
    return st.one_of(
        st.from_regex(r"[a-z][a-z0-9]{0,12}", fullmatch=True),
        common,
        surrogate,
        st.text(max_size=20),
    )


@st.composite
def invocation(
    draw: st.DrawFn, w: World, cni_type: str, command: str
) -> tuple[dict[str, str], bytes]:
    env = w.base_env()
    env["CNI_COMMAND"] = command
    for name in ("CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS", "CNI_ARGS"):
        if draw(st.integers(min_value=0, max_value=6)) == 0:
            env[name] = draw(env_value(w, name))
    conf = draw(mutated_conf(valid_conf(w, cni_type, command)))
    if draw(st.integers(min_value=0, max_value=15)) == 0:
        stdin = draw(
            st.one_of(
                st.binary(max_size=40),
                st.just(b'{"name": "\xff\xfe", "cniVersion": "1.0.0"}'),
                st.just(b"[]"),
                st.just(b'{"name": 5}'),
            )
        )
    else:
        stdin = json.dumps(conf).encode()
    return env, stdin


# ------------------------------------------------------------ assertions


def assert_clean(cmd: str, o: Outcome) -> dict[str, Any] | None:
    assert "Traceback" not in o.stderr, o.stderr
    if o.code == 0:
        if cmd == "ADD":
            doc = json.loads(o.stdout)
            assert isinstance(doc, dict) and "cniVersion" in doc, o.stdout
            return doc
        assert o.stdout == "", o.stdout
        return None
    assert o.code == 1, o
    doc = json.loads(o.stdout)  # exactly one document, or this raises
    assert isinstance(doc, dict), doc
    assert isinstance(doc.get("code"), int), doc
    assert isinstance(doc.get("msg"), str) and doc["msg"], doc
    assert doc["code"] != 999, f"unexpected exception: {doc}\n{o.stderr}"
    return doc


def exercise(w: World, cni_type: str, env: dict[str, str], stdin: bytes) -> int:
    """The command, then what a runtime does after it, then the world check;
    the first command's error code (0: success)."""
    cmd = env["CNI_COMMAND"]
    first = w.run(cni_type, env, stdin)
    doc = assert_clean(cmd, first)
    if cmd != "DEL":
        delete = w.run(cni_type, {**env, "CNI_COMMAND": "DEL"}, stdin)
        assert_clean("DEL", delete)
        if cmd == "ADD" and first.code == 0:
            assert delete.code == 0, (delete.stdout, delete.stderr)
    w.assert_nothing_left()
    return int(doc.get("code", 0)) if doc and first.code else 0


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("cni_type", PLUGINS)
@FUZZ
@given(data=st.data())
def test_any_input_gets_a_clean_answer_and_leaves_nothing(
    cni_type: str, command: str, data: st.DataObject
) -> None:
    with world() as w:
        env, stdin = data.draw(invocation(w, cni_type, command))
        code = exercise(w, cni_type, env, stdin)
        # --hypothesis-show-statistics: how many examples got how far.
        event(f"{command} -> {code}")


# ---------------------------------------------------------------- corpus


def _env(**over: str) -> dict[str, str]:
    return over


#: Issue 10's table (and what fuzzing found), run on every CI run: the env
#: changes, the netconf changes and the ipam changes of an otherwise valid ADD.
CORPUS: dict[str, tuple[dict[str, str], dict[str, Any], dict[str, Any]]] = {
    "ifname-percent-d": (_env(CNI_IFNAME="%d"), {}, {}),
    "netns-fifo": (_env(CNI_NETNS="{fifo}"), {}, {}),
    "netns-plain-file": (_env(CNI_NETNS="{plain}"), {}, {}),
    "container-id-long": (_env(CNI_CONTAINERID="c" * 600), {}, {}),
    "netns-non-utf8": (_env(CNI_NETNS=os.fsdecode(b"/run/netns/\xff")), {}, {}),
    "log-file-dev-full": ({}, {"logFile": "/dev/full", "logLevel": "debug"}, {}),
    "log-file-fifo": ({}, {"logFile": "{fifo}"}, {}),
    # Found by the fuzz suite: a relative logFile was created in the cwd.
    "log-file-relative": ({}, {"logFile": "off"}, {}),
    "ipam-socket-wrong-type": ({}, {}, {"socket": 42}),
    "ipam-socket-plain-file": ({}, {}, {"socket": "{plain}"}),
    "ipam-socket-directory": ({}, {}, {"socket": "{root}"}),
    "ipam-timeout-nan": ({}, {}, {"timeout": float("nan")}),
    "ipam-timeout-inf": ({}, {}, {"timeout": float("inf")}),
    "ipam-timeout-2-64": ({}, {}, {"timeout": 2**64}),
    "ipam-timeout-bool": ({}, {}, {"timeout": True}),
    "ipam-type-relative-path": ({}, {}, {"type": "../../../bin/true"}),
    "ipam-type-absolute-path": ({}, {}, {"type": "/bin/true"}),
    "ipam-type-dhcp-missing": ({}, {}, {"type": "dhcp"}),
    "network-name-10mb": ({}, {"name": "n" * (10 * 1024 * 1024)}, {}),
    # Found by the soak run: a number as the pool list was a TypeError (999).
    "ipam-pool-a-number": ({}, {}, {"default_ipv4_ippool": 5}),
    "ipam-pool-list-of-null": ({}, {}, {"default_ipv4_ippool": [None]}),
}


@pytest.mark.parametrize("case", list(CORPUS), ids=list(CORPUS))
@pytest.mark.parametrize("cni_type", ["sriov", "ib-sriov"])
def test_issue_10_table_rows_answer_cleanly(cni_type: str, case: str) -> None:
    env_over, conf_over, ipam_over = CORPUS[case]
    with world() as w:
        paths = {"fifo": str(w.fifo), "plain": str(w.plain), "root": str(w.root)}

        def fill(v: Any) -> Any:
            return v.format(**paths) if isinstance(v, str) and "{" in v else v

        env = {**w.base_env(), "CNI_COMMAND": "ADD"}
        env.update({k: fill(v) for k, v in env_over.items()})
        conf = valid_conf(w, cni_type, "ADD")
        conf.update({k: fill(v) for k, v in conf_over.items()})
        conf["ipam"].update({k: fill(v) for k, v in ipam_over.items()})
        exercise(w, cni_type, env, json.dumps(conf).encode())


def test_fake_ipam_is_the_one_checked() -> None:
    """The world check reads the same FakeIpam the plugins allocate from."""
    with world() as w:
        env = {**w.base_env(), "CNI_COMMAND": "ADD"}
        conf = valid_conf(w, "sriov", "ADD")
        ok = w.run("sriov", env, json.dumps(conf).encode())
        assert ok.code == 0, ok
        assert isinstance(w.node.ipam, FakeIpam) and w.node.ipam.held
        with pytest.raises(AssertionError):
            w.assert_nothing_left()
        w.run("sriov", {**env, "CNI_COMMAND": "DEL"}, json.dumps(conf).encode())
        w.assert_nothing_left()
