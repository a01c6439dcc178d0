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
        # Absolute interpreter, isolated mode: the runtime's env can't steer it.
        assert launcher[0] == f"#!{python} -I"
    assert os.readlink(bin_dir / "ipamd") == str(prefix / "venv" / "bin" / "ipamd")
    assert os.readlink(bin_dir / "railyard-sim") == str(
        prefix / "venv" / "bin" / "railyard-sim"
    )
    assert os.readlink(bin_dir / "railyard-exporter") == str(
        prefix / "venv" / "bin" / "railyard-exporter"
    )
    site = next((prefix / "venv" / "lib").glob("python3*/site-packages"))
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
    again = install(prefix, cni_bin, bin_dir)  # re-install = upgrade, no --force needed
    assert again.returncode == 0, again.stderr
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
    docs = {}
    for path in sorted((PACKAGING / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"], path
            docs[(doc["kind"], doc["metadata"]["name"])] = doc
    deploy = docs[("Deployment", "railyard-ipamd")]["spec"]
    assert deploy["replicas"] == 1 and deploy["strategy"]["type"] == "Recreate"
    volumes = {v["name"]: v for v in deploy["template"]["spec"]["volumes"]}
    claim = volumes["db"]["persistentVolumeClaim"]["claimName"]
    assert ("PersistentVolumeClaim", claim) in docs
    assert ("Secret", volumes["tls"]["secret"]["secretName"]) in docs
    args = deploy["template"]["spec"]["containers"][0]["args"]
    assert any(a.startswith("--tls-cert=") for a in args)
    service = docs[("Service", "railyard-ipamd")]["spec"]
    assert service["selector"] == deploy["selector"]["matchLabels"]

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
