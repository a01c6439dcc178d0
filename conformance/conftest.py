# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the conformance suite: which binaries, which subjects, which host.

Standard library + pytest. The suite never imports Railyard: our plugins are
judged as *installed* binaries, so a packaging mistake fails it. Where they come
from, first match wins:

1. ``CONFORMANCE_CNI_BIN=<dir>`` (or ``--cni-bin-dir``): any directory holding
   ``sriov``/``ib-sriov``/``rdma`` (another build); ``railyard-sim`` and
   ``ipamd`` are then looked up in ``CONFORMANCE_TOOLS_DIR`` or on PATH.
2. ``RAILYARD_CNI_BIN`` + ``RAILYARD_PREFIX``: the node installation ``./dev test``
   made with packaging/install.sh --with-sim (``/opt/cni/bin``, ``/opt/railyard``).

Our subjects run on the simulated host, so they are exec'd from the lab's CNI
bin dir: launchers the installed ``railyard-sim up`` writes, running the
installed plugins with the simulated host's dependencies injected.
3. Otherwise packaging/install.sh installs into a session temp dir, and
   packaging/uninstall.sh removes it at the end.

``CONFORMANCE_SUBJECTS=host-device,sriov`` (or ``--subjects``) limits the run;
``CONFORMANCE_REFERENCE_CNI_DIR`` (default /usr/lib/cni) holds the Go plugins.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conformance import subjects as subj
from conformance.runner import PluginError

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEVIATIONS = json.loads((HERE / "deviations.json").read_text())
OUR_PLUGINS = ("sriov", "ib-sriov", "rdma")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance")
    group.addoption(
        "--cni-bin-dir",
        default=os.environ.get("CONFORMANCE_CNI_BIN", ""),
        help="directory with the sriov/ib-sriov/rdma binaries to judge",
    )
    group.addoption(
        "--reference-cni-dir",
        default=os.environ.get("CONFORMANCE_REFERENCE_CNI_DIR", "/usr/lib/cni"),
        help="directory with the Go reference plugins (host-device, host-local)",
    )
    group.addoption(
        "--subjects",
        default=os.environ.get("CONFORMANCE_SUBJECTS", ""),
        help="comma-separated subjects to run (default: all)",
    )


def _opt(config: pytest.Config, name: str, env: str, default: str = "") -> str:
    try:
        return config.getoption(name) or default
    except ValueError:  # conftest not initial (pytest run on another dir first)
        return os.environ.get(env, default)


SUBJECT_NAMES = ("host-device", "host-local", *OUR_PLUGINS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "subject_name" not in metafunc.fixturenames:
        return
    wanted = _opt(metafunc.config, "--subjects", "CONFORMANCE_SUBJECTS")
    names = [n for n in SUBJECT_NAMES if not wanted or n in wanted.split(",")]
    metafunc.parametrize("subject_name", names)


# ------------------------------------------------------------- installation


class Installation:
    """Where the binaries under test and their operator tools are."""

    def __init__(self, cni_bin: Path, tools: Path | None) -> None:
        self.cni_bin = cni_bin
        self.tools = tools

    def tool(self, name: str) -> str:
        if self.tools is not None and (self.tools / name).exists():
            return str(self.tools / name)
        found = subprocess.run(
            ["sh", "-c", f"command -v {name}"], capture_output=True, text=True
        ).stdout.strip()
        if not found:
            pytest.fail(f"{name} not found (set CONFORMANCE_TOOLS_DIR)")
        return found


@pytest.fixture(scope="session")
def installation(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installation]:
    explicit = _opt(request.config, "--cni-bin-dir", "CONFORMANCE_CNI_BIN")
    if explicit:
        tools = os.environ.get("CONFORMANCE_TOOLS_DIR")
        yield Installation(Path(explicit), Path(tools) if tools else None)
        return
    node_bin, node_prefix = (
        os.environ.get("RAILYARD_CNI_BIN"),
        os.environ.get("RAILYARD_PREFIX"),
    )
    if (
        node_bin
        and node_prefix
        and (Path(node_prefix) / "install-manifest.txt").exists()
    ):
        yield Installation(Path(node_bin), Path(node_prefix) / "venv" / "bin")
        return
    root = tmp_path_factory.mktemp("rc-install")
    prefix, cni_bin = root / "opt", root / "cni-bin"
    proc = subprocess.run(
        [
            "bash",
            str(REPO / "packaging" / "install.sh"),
            "--prefix",
            str(prefix),
            "--cni-bin-dir",
            str(cni_bin),
            "--bin-dir",
            "none",
            "--with-sim",
            str(REPO),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.fail(f"packaging/install.sh failed:\n{proc.stderr[-3000:]}")
    try:
        yield Installation(cni_bin, prefix / "venv" / "bin")
    finally:
        subprocess.run(
            ["bash", str(REPO / "packaging" / "uninstall.sh"), "--prefix", str(prefix)],
            capture_output=True,
            check=False,
        )


# ------------------------------------------------------------------ subjects


@pytest.fixture(scope="session")
def subject_pool(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], subj.Subject]]:
    """Builds each subject once per session (a lab and an ipamd are not cheap)."""
    built: dict[str, subj.Subject] = {}
    reference = Path(
        _opt(
            request.config,
            "--reference-cni-dir",
            "CONFORMANCE_REFERENCE_CNI_DIR",
            "/usr/lib/cni",
        )
    )

    def get(name: str) -> subj.Subject:
        if name in built:
            return built[name]
        workdir = tmp_path_factory.mktemp(f"subject-{name}")
        if name in ("host-device", "host-local"):
            if not (reference / name).exists():
                pytest.skip(f"reference plugin {reference / name} not installed")
            cls = subj.HostDevice if name == "host-device" else subj.HostLocal
            built[name] = cls([reference], workdir)
        else:
            # Requested lazily, so a run of the Go subjects alone installs
            # nothing; being set up after `installation`, the lab is also torn
            # down before it (railyard-sim lives in the installed venv).
            request.getfixturevalue("installation")
            host = request.getfixturevalue("railyard_lab")
            built[name] = host.subject(name, workdir)
        return built[name]

    try:
        yield get
    finally:
        # Every subject is closed even if one fails to; the first error wins.
        errors: list[BaseException] = []
        for s in built.values():
            try:
                s.close()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture(scope="session")
def railyard_lab(
    installation: Installation, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[object]:
    """The simulated host (and its ipamd) for our subjects, one per session."""
    from conformance.railyard_host import RailyardHost

    host = RailyardHost(installation, tmp_path_factory.mktemp("rc-lab"))
    try:
        yield host
    finally:
        host.down()


@pytest.fixture
def subject(
    subject_name: str, subject_pool: Callable[[str], subj.Subject]
) -> subj.Subject:
    return subject_pool(subject_name)


@pytest.fixture
def deviation(
    request: pytest.FixtureRequest, subject: subj.Subject
) -> Callable[[str], None]:
    """``deviation("case-id")``: if the subject is recorded as deviating from the
    spec in this case, the test becomes a strict xfail carrying the explanation
    (so a fixed plugin turns it into a failure and the record must go)."""

    def expect(case: str) -> None:
        record = DEVIATIONS.get(subject.name, {}).get(case)
        if record:
            request.applymarker(
                pytest.mark.xfail(
                    strict=True,
                    # A plugin error surfacing from the runner is the deviation too.
                    raises=(AssertionError, PluginError),
                    reason=f"recorded deviation of {subject.name}: {record['why']}",
                )
            )

    return expect
