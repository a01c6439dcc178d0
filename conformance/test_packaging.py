# SPDX-License-Identifier: Apache-2.0
"""packaging/: the installer, its uninstaller, the unit and the manifests.

The installer is exercised for real into temporary directories (venv, pip,
launchers, manifest), never into /opt or /usr/local.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PACKAGING = REPO / "packaging"
PLUGINS = ("sriov", "ib-sriov", "rdma", "railyard-ipam")


def install(
    prefix: Path, cni_bin: Path, bin_dir: Path, *extra: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "bash",
            str(PACKAGING / "install.sh"),
            "--prefix",
            str(prefix),
            "--cni-bin-dir",
            str(cni_bin),
            "--bin-dir",
            str(bin_dir),
            *extra,
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def uninstall(prefix: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(PACKAGING / "uninstall.sh"), "--prefix", str(prefix)],
        capture_output=True,
        text=True,
        timeout=120,
    )


#: Interpreters a machine may have beside the python3 on PATH.
INTERPRETERS = ("/usr/bin/python3", "/usr/local/bin/python3", "python3")


def realpath_of(python: str) -> str:
    """The interpreter binary ``python`` runs, "" if there is none."""
    exe = shutil.which(python)
    return os.path.realpath(exe) if exe else ""


def venv_interpreter(prefix: Path) -> str:
    """The interpreter that made the installed venv (its pyvenv.cfg)."""
    for line in (prefix / "venv" / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "executable":
            return value.strip()
    return ""


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(root: Path) -> set[str]:
    return (
        {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()
    )


def test_install_refuses_to_overwrite_a_plugin_it_did_not_create(
    tmp_path: Path,
) -> None:
    cni_bin = tmp_path / "cni"
    cni_bin.mkdir()
    foreign = cni_bin / "rdma"  # e.g. k8snetworkplumbingwg's rdma-cni
    foreign.write_text("#!/bin/sh\necho vendor\n")
    before = digest(foreign)
    proc = install(tmp_path / "opt", cni_bin, tmp_path / "bin")
    assert proc.returncode != 0
    assert "refusing to overwrite" in proc.stderr and str(foreign) in proc.stderr
    assert digest(foreign) == before
    assert tree(cni_bin) == {"rdma"}  # nothing else written either
    assert not (tmp_path / "opt").exists()


@pytest.mark.integration
def test_install_reinstall_and_uninstall_touch_only_what_install_made(
    tmp_path: Path,
) -> None:
    prefix, cni_bin, bin_dir = tmp_path / "opt", tmp_path / "cni", tmp_path / "bin"
    cni_bin.mkdir()
    neighbour = cni_bin / "host-device"  # another package's plugin in the same dir
    shutil.copy("/bin/true", neighbour)
    displaced = cni_bin / "sriov"  # the Go sriov-cni, replaced on purpose (--force)
    displaced.write_text("#!/bin/sh\necho go-sriov\n")
    before = {p.name: digest(p) for p in (neighbour, displaced)}

    first = install(prefix, cni_bin, bin_dir, "--force")
    assert first.returncode == 0, first.stderr
    python = prefix / "venv" / "bin" / "python"
    for name in PLUGINS:
        launcher = (cni_bin / name).read_text().splitlines()
        # Absolute interpreter, isolated mode without site-packages: the
        # runtime's env can't steer it and the shim imports the stdlib only.
        assert launcher[0] == f"#!{python} -IS"
        assert f'railyard-cni launcher for CNI type "{name}"' in launcher[1]
    for tool in ("ipamd", "railyard-agent", "railyard-exporter"):
        assert os.readlink(bin_dir / tool) == str(prefix / "venv" / "bin" / tool)
    assert os.readlink(bin_dir / "railyard") == str(
        prefix / "venv" / "bin" / "railyard"
    )
    site = next((prefix / "venv" / "lib").glob("python3*/site-packages"))
    # The simulated host is not part of a node unless asked for (--with-sim).
    assert not (bin_dir / "railyard-sim").exists()
    assert not (site / "railyard_sim").exists()
    assert list(
        (site / "cni" / "plugins" / "sriov" / "__pycache__").glob("__main__*.pyc")
    )
    assert not (site / "conformance").exists() and not (site / "tests").exists()

    # A poisoned PYTHONPATH (a runtime passing its own environment) is ignored.
    evil = tmp_path / "evil" / "cni"
    evil.mkdir(parents=True)
    (evil / "__init__.py").write_text("raise SystemExit('evil cni imported')\n")
    env = {
        "CNI_COMMAND": "VERSION",
        "PYTHONPATH": str(evil.parent),
        "PATH": "/nonexistent",
    }
    version = subprocess.run(
        [str(cni_bin / "sriov")], env=env, capture_output=True, text=True
    )
    assert version.returncode == 0 and "supportedVersions" in version.stdout, (
        version.stderr
    )

    manifest = (prefix / "install-manifest.txt").read_text()
    # A plugin call in progress while the node is upgraded (multus #1221: "Text
    # file busy"): the shim runs (direct mode, waiting for its stdin) while
    # install.sh replaces it; both succeed, the call sees the old file whole.
    busy = subprocess.Popen(
        [str(cni_bin / "railyard-ipam")],
        env={
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": "busy",
            "CNI_NETNS": "/proc/1/ns/net",
            "CNI_IFNAME": "net1",
            "CNI_PATH": str(cni_bin),
            "RAILYARD_AGENT_SOCKET": str(tmp_path / "no-agent.sock"),
        },
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # Re-install = upgrade, no --force needed; here with the simulated host.
    again = install(prefix, cni_bin, bin_dir, "--with-sim")
    out, err = busy.communicate(b"{not json", timeout=60)
    assert again.returncode == 0, again.stderr
    assert b'"code": 6' in out and busy.returncode == 1, (out, err)
    sim_link = f"link\t{bin_dir / 'railyard-sim'}\t{prefix / 'venv/bin/railyard-sim'}"
    assert sorted((prefix / "install-manifest.txt").read_text().splitlines()) == sorted(
        [*manifest.splitlines(), sim_link]
    )
    assert (site / "railyard_sim" / "launchers.py").is_file()
    # Without the flag again: the simulator and its link go, the rest is as
    # before. And with another interpreter where the machine has two (a
    # python3 on PATH that is not the distro's): the venv is made again by it.
    made_by = venv_interpreter(prefix)
    other = next((p for p in INTERPRETERS if realpath_of(p) not in ("", made_by)), "")
    plain = install(prefix, cni_bin, bin_dir, *(["--python", other] if other else []))
    assert plain.returncode == 0, plain.stderr
    if other:
        assert "making it again" in plain.stderr
        assert venv_interpreter(prefix) == realpath_of(other)
        version = subprocess.run(
            [str(cni_bin / "sriov")], env=env, capture_output=True, text=True
        )
        assert version.returncode == 0 and "supportedVersions" in version.stdout
    assert not (site / "railyard_sim").exists()
    assert not (bin_dir / "railyard-sim").is_symlink()
    assert sorted((prefix / "install-manifest.txt").read_text().splitlines()) == sorted(
        manifest.splitlines()
    )

    # Someone edits one of our files after install: uninstall must leave it.
    (cni_bin / "rdma").write_text("#!/bin/sh\n# hand-edited\n")
    gone = uninstall(prefix)
    assert gone.returncode == 0, gone.stderr
    assert "changed since install" in gone.stderr
    assert tree(cni_bin) == {"host-device", "sriov", "rdma"}
    assert {p.name: digest(p) for p in (neighbour, displaced)} == before
    assert "hand-edited" in (cni_bin / "rdma").read_text()
    assert not prefix.exists() and not bin_dir.exists()


# ----------------------------------------------------------------- manifests


def test_kubernetes_manifests_parse_and_describe_the_topology() -> None:
    yaml = pytest.importorskip("yaml")

    def manifests(skip: str) -> dict[tuple[str, str], Any]:
        docs = {}
        for path in sorted((PACKAGING / "k8s").glob("*.yaml")):
            if path.name == skip:
                continue
            for doc in yaml.safe_load_all(path.read_text()):
                assert doc["apiVersion"] and doc["kind"], path
                assert doc["metadata"]["name"], path
                docs[(doc["kind"], doc["metadata"]["name"])] = doc
        return docs

    # Two ways to run the central ipamd, each a complete set with the rest:
    # one replica on SQLite, or active/standby replicas on PostgreSQL.
    sqlite = manifests(skip="ipamd-deployment.yaml")
    deploy = sqlite[("Deployment", "railyard-ipamd")]["spec"]
    assert deploy["replicas"] == 1 and deploy["strategy"]["type"] == "Recreate"
    volumes = {v["name"]: v for v in deploy["template"]["spec"]["volumes"]}
    claim = volumes["db"]["persistentVolumeClaim"]["claimName"]
    assert ("PersistentVolumeClaim", claim) in sqlite
    assert ("Secret", volumes["tls"]["secret"]["secretName"]) in sqlite
    args = deploy["template"]["spec"]["containers"][0]["args"]
    assert any(a.startswith("--tls-cert=") for a in args)
    service = sqlite[("Service", "railyard-ipamd")]["spec"]
    assert service["selector"] == deploy["selector"]["matchLabels"]

    docs = manifests(skip="ipamd-deployment-sqlite.yaml")
    replicated = docs[("Deployment", "railyard-ipamd")]["spec"]
    assert replicated["replicas"] == 2
    container = replicated["template"]["spec"]["containers"][0]
    # Ready means active: the Service sends allocations to the lease holder only.
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    db_env = {e["name"]: e for e in container.get("env", [])}["RAILYARD_IPAMD_DB"]
    assert db_env["valueFrom"]["secretKeyRef"]["name"]
    service = docs[("Service", "railyard-ipamd")]["spec"]
    assert service["selector"] == replicated["selector"]["matchLabels"]

    node = docs[("DaemonSet", "railyard-node")]["spec"]["template"]["spec"]
    assert node["initContainers"][0]["command"] == ["/opt/railyard/install-to-host.sh"]
    host_paths = {v["hostPath"]["path"] for v in node["volumes"] if "hostPath" in v}
    assert "/run/railyard" in host_paths  # the node's ipamd socket dir

    pools_text = docs[("ConfigMap", "railyard-pools")]["data"]["pools.yaml"]
    pools = [d for d in yaml.safe_load_all(pools_text)]
    assert [p["metadata"]["name"] for p in pools] == [
        f"gpu{n}-net1{n}" for n in range(1, 9)
    ]
    assert all(p["kind"] == "SpiderIPPool" for p in pools)


def test_node_daemonset_runs_the_agent_as_the_warm_path_needs() -> None:
    yaml = pytest.importorskip("yaml")
    (ds,) = [
        d
        for d in yaml.safe_load_all(
            (PACKAGING / "k8s" / "node-daemonset.yaml").read_text()
        )
        if d["kind"] == "DaemonSet"
    ]
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    (agent,) = [c for c in spec["containers"] if c["name"] == "agent"]
    assert agent["command"] == ["/opt/railyard/venv/bin/railyard-agent"]
    assert agent["securityContext"]["privileged"] is True
    # Guaranteed QoS: every request equals its limit.
    assert agent["resources"]["requests"] == agent["resources"]["limits"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    for netns_dir in ("/run/netns", "/var/run/netns"):
        mount = mounts[netns_dir]
        assert mount["mountPropagation"] == "HostToContainer"
        assert volumes[mount["name"]]["hostPath"]["path"] == netns_dir


def test_systemd_unit_runs_the_agent_in_a_private_socket_dir() -> None:
    unit = (PACKAGING / "systemd" / "railyard-agent.service").read_text()
    assert "--socket /run/railyard/agent/agent.sock" in unit
    assert "RuntimeDirectory=railyard/agent" in unit
    assert "RuntimeDirectoryMode=0700" in unit
    assert "Restart=always" in unit


def test_systemd_unit_runs_ipamd_on_the_node_socket() -> None:
    unit = (PACKAGING / "systemd" / "railyard-ipamd.service").read_text()
    assert "--db sqlite:////var/lib/railyard/ipam.db" in unit
    assert "--listen unix:///run/railyard/ipamd.sock" in unit
    for key in (
        "RuntimeDirectory=railyard",
        "StateDirectory=railyard",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
    ):
        assert key in unit


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="no systemd-analyze"
)
@pytest.mark.parametrize(
    ("unit_name", "binary"),
    [
        ("railyard-ipamd.service", "/opt/railyard/venv/bin/ipamd"),
        ("railyard-agent.service", "/opt/railyard/venv/bin/railyard-agent"),
        ("railyard-exporter.service", "/opt/railyard/venv/bin/railyard-exporter"),
    ],
)
def test_systemd_unit_passes_systemd_analyze_verify(
    tmp_path: Path, unit_name: str, binary: str
) -> None:
    # verify insists the ExecStart binary exists: point it at a stand-in.
    fake = tmp_path / Path(binary).name
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    unit = (PACKAGING / "systemd" / unit_name).read_text()
    copy = tmp_path / unit_name
    copy.write_text(unit.replace(binary, str(fake)))
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(copy)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr


def test_metrics_ports_are_exposed_and_annotated() -> None:
    yaml = pytest.importorskip("yaml")
    docs = {
        (d["kind"], d["metadata"]["name"]): d
        for path in sorted((PACKAGING / "k8s").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
    }
    pods = {
        "railyard-node": docs[("DaemonSet", "railyard-node")],
        "railyard-ipamd": docs[("Deployment", "railyard-ipamd")],
    }
    ports = {}  # (workload, port name) -> number
    for workload, doc in pods.items():
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for port in container.get("ports", []):
                ports[(workload, port["name"])] = port["containerPort"]
            listen = [a for a in container.get("args", []) if "listen=0.0.0.0:" in a]
            for arg in listen:
                if "metrics" in arg:
                    number = int(arg.rsplit(":", 1)[1])
                    assert number in {p["containerPort"] for p in container["ports"]}
    assert ports[("railyard-node", "rdma-metrics")] == 9435
    assert ports[("railyard-node", "ipamd-metrics")] == 9436
    assert ports[("railyard-ipamd", "ipamd-metrics")] == 9436
    annotated = [
        d
        for (kind, _), d in docs.items()
        if kind == "Service"
        and d["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true"
    ]
    assert len(annotated) == 3
    for svc in annotated:
        port = int(svc["metadata"]["annotations"]["prometheus.io/port"])
        assert port in {p["port"] for p in svc["spec"]["ports"]}, svc["metadata"]
    monitor = docs[("PodMonitor", "railyard")]["spec"]["podMetricsEndpoints"]
    assert {e["port"] for e in monitor} == {"rdma-metrics", "ipamd-metrics"}
    exporter = (PACKAGING / "systemd" / "railyard-exporter.service").read_text()
    assert "--listen 0.0.0.0:9435" in exporter
    ipamd = (PACKAGING / "systemd" / "railyard-ipamd.service").read_text()
    assert "--metrics-listen 0.0.0.0:9436" in ipamd
