# SPDX-License-Identifier: Apache-2.0
"""A real Prometheus (Debian's ``prometheus``) scrapes railyard-exporter and
ipamd on the simulated host.

Two pods hold three RDMA NICs; traffic goes through one of them, and the
Prometheus HTTP query API must show a non-zero byte rate for exactly that NIC
of that pod. ipamd's pool gauges, as Prometheus stored them, must match
``ipamd pool list``. Everything runs on loopback ports and in the lab's
namespaces; Prometheus, the exporter, the traffic and the lab are torn down
in ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from railyard_sim import daemon, pods
from railyard_sim.cli import do_down
from railyard_sim.lab import Lab
from tests.doubles.http_probe import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the simulated host needs root"),
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="Debian's prometheus package is not installed (./dev installs it)",
    ),
]
SCRAPE_INTERVAL = "1s"


def wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout}s")


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class Prom:
    """The Prometheus HTTP API of one server."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def wait(self, expr: str, timeout: float = 15.0) -> list[dict[str, Any]]:
        """The query's result once it is not empty."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                return result
            time.sleep(0.5)
        raise AssertionError(f"no result for {expr} within {timeout}s")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Lab with 2 rails, ipamd with metrics, 2 pods, the exporter, Prometheus
    (one for the module: building it is most of the wall time)."""
    tmp_path = tmp_path_factory.mktemp("prometheus")
    lab_dir = tmp_path / "lab"
    procs: list[subprocess.Popen[bytes]] = []
    ports = {name: free_port() for name in ("ipamd", "exporter", "prometheus")}
    lab = Lab.up(lab_dir, rails=2, vfs_per_pf=2)
    try:
        daemon.start(lab.dir, metrics_listen=f"127.0.0.1:{ports['ipamd']}")
        daemon.apply_pools(lab.dir, lab.pools_file)
        trainer = pods.create(lab, "trainer")
        pods.attach(lab, trainer, nics=2, rdma=True, ipv6=False)
        other = pods.create(lab, "other")
        pods.attach(lab, other, nics=1, rdma=True, ipv6=False)
        exporter = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "railyard_sim.cli",
                "exporter",
                "--lab",
                str(lab.dir),
                "--listen",
                f"127.0.0.1:{ports['exporter']}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "exporter.log", "wb"),  # noqa: SIM115
        )
        procs.append(exporter)
        wait_http(f"http://127.0.0.1:{ports['exporter']}/metrics", 20, exporter)
        config = tmp_path / "prometheus.yml"
        config.write_text(
            json.dumps(  # YAML is a superset of JSON
                {
                    "global": {
                        "scrape_interval": SCRAPE_INTERVAL,
                        "evaluation_interval": SCRAPE_INTERVAL,
                    },
                    "scrape_configs": [
                        {
                            "job_name": "railyard-exporter",
                            "static_configs": [
                                {"targets": [f"127.0.0.1:{ports['exporter']}"]}
                            ],
                        },
                        {
                            "job_name": "ipamd",
                            "static_configs": [
                                {"targets": [f"127.0.0.1:{ports['ipamd']}"]}
                            ],
                        },
                    ],
                }
            )
        )
        prometheus = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{ports['prometheus']}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "prometheus.log", "wb"),  # noqa: SIM115
        )
        procs.append(prometheus)
        wait_http(f"http://127.0.0.1:{ports['prometheus']}/-/ready", 30, prometheus)
        yield {
            "lab": lab,
            "trainer": trainer,
            "other": other,
            "prom": Prom(ports["prometheus"]),
        }
    finally:
        for proc in reversed(procs):
            stop(proc)
        do_down(lab.dir)


def ping(netns: str, src: str, dst: str) -> subprocess.Popen[bytes]:
    """Steady traffic through one rail: 1 KiB echo requests every 50 ms
    (iputils' ping if installed, else busybox's, as ``railyard-sim show``)."""
    cmd = [shutil.which("ping") or "busybox"]
    if not cmd[0].endswith("/ping"):
        cmd.append("ping")
    return subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            netns,
            *cmd,
            "-q",
            "-i",
            "0.05",
            "-s",
            "1024",
            "-w",
            "30",
            "-I",
            src,
            dst,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_rate_is_non_zero_for_exactly_the_nic_with_traffic(
    node: dict[str, Any],
) -> None:
    prom: Prom = node["prom"]
    lab: Lab = node["lab"]
    trainer: pods.Pod = node["trainer"]
    # Every NIC of both pods is scraped before any traffic flows.
    series = prom.wait('count(rdma_vport_speed_mbps_total{pod_name!=""}) == 3')
    assert series
    # net2: the only NIC on its rail, so no broadcast of this traffic (ARP)
    # reaches the others.
    nic = trainer.nics[1]
    src = nic.result["ips"][0]["address"].split("/")[0]
    gateway = lab.rail(nic.rail).gateway_v4
    time.sleep(3)  # the window below must not reach back to the ADDs' ARP
    traffic = ping(trainer.netns, src, gateway)
    try:
        # A NIC without traffic still sees the odd neighbour probe (tens of
        # bytes), so "non-zero" is read as above 1 kB/s; the ping below
        # carries ~20 kB/s.
        expr = 'rate(rdma_rx_vport_rdma_unicast_bytes_total{pod_name!=""}[3s]) > 1000'
        busy = prom.wait(expr, timeout=20)
        time.sleep(3.5)  # a whole window inside the traffic
        busy = prom.query(expr)
        everything = prom.query(
            'rate(rdma_rx_vport_rdma_unicast_bytes_total{pod_name!=""}[3s])'
        )
    finally:
        traffic.terminate()
        traffic.wait(5)
    assert [(s["metric"]["pod_name"], s["metric"]["net_dev_name"]) for s in busy] == [
        ("trainer", nic.ifname)
    ]
    labels = busy[0]["metric"]
    assert labels["pod_namespace"] == pods.POD_NAMESPACE
    assert labels["ifname"] == nic.rdma
    assert labels["rdma_parent_name"] == lab.rail(nic.rail).pf_netdev
    assert labels["is_root"] == "false"
    # 1 KiB replies every 50 ms (less when the machine is busy): far above
    # anything but this traffic.
    assert float(busy[0]["value"][1]) > 5000
    rates = {
        (s["metric"]["pod_name"], s["metric"]["net_dev_name"]): float(s["value"][1])
        for s in everything
    }
    assert set(rates) == {("trainer", "net1"), ("trainer", "net2"), ("other", "net1")}
    quiet = {k: v for k, v in rates.items() if k != ("trainer", nic.ifname)}
    assert all(v < 200 for v in quiet.values()), quiet


def test_ipamd_pool_gauges_match_pool_list(node: dict[str, Any]) -> None:
    prom: Prom = node["prom"]
    lab: Lab = node["lab"]
    listed = subprocess.run(
        [
            daemon.ipamd_command(),
            "pool",
            "list",
            "--json",
            "--socket",
            str(daemon.socket_path(lab.dir)),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    pools = json.loads(listed.stdout)["pools"]
    assert sum(p["allocatedIPCount"] for p in pools) == 3
    prom.wait("sum(ipamd_pool_allocated_ips) == 3")
    stored = {
        (s["metric"]["__name__"], s["metric"]["pool"]): float(s["value"][1])
        for s in prom.query('{__name__=~"ipamd_pool_(allocated|capacity|free)_ips"}')
    }
    for p in pools:
        assert stored[("ipamd_pool_allocated_ips", p["name"])] == p["allocatedIPCount"]
        assert stored[("ipamd_pool_capacity_ips", p["name"])] == p["totalIPCount"]
        assert stored[("ipamd_pool_free_ips", p["name"])] == (
            p["totalIPCount"] - p["allocatedIPCount"]
        )
    ok = prom.query('sum(ipamd_allocations_total{result="ok"})')
    assert float(ok[0]["value"][1]) == 3


def sim(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "railyard_sim.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_bumped_error_counters_reach_show_and_prometheus(
    node: dict[str, Any],
) -> None:
    prom: Prom = node["prom"]
    lab: Lab = node["lab"]
    lab_opt = ("--lab", str(lab.dir))
    sim("counters", "bump", *lab_opt, "trainer", "net1", "out_of_sequence", "--by", "5")
    sim("counters", "bump", *lab_opt, "other", "net1", "rx_prio3_discards", "--by", "2")
    shown = sim("show", *lab_opt, "trainer")
    section = shown.split("# RDMA counters", 1)[1]
    net1 = section.split("net1 (", 1)[1].split("net2 (", 1)[0]
    assert "rdma_out_of_sequence_total" in net1 and " 5\n" in net1
    assert "rdma_rx_vport_rdma_unicast_bytes_total" in net1
    [oos] = prom.wait(
        'rdma_out_of_sequence_total{pod_name="trainer", net_dev_name="net1"} == 5'
    )
    assert oos["metric"]["pod_namespace"] == pods.POD_NAMESPACE
    [discards] = prom.wait(
        'rdma_rx_discards_total{pod_name="other", priority="3"} == 2'
    )
    assert discards["metric"]["net_dev_name"] == "net1"
    others = prom.query('rdma_out_of_sequence_total{pod_name!=""} > 0')
    assert [(s["metric"]["pod_name"], s["metric"]["net_dev_name"]) for s in others] == [
        ("trainer", "net1")
    ]
