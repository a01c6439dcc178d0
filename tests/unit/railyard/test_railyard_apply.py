# SPDX-License-Identifier: Apache-2.0
"""``railyard apply`` is all or nothing; get/delete network; the CLI's inputs.

ipamd is a state-based double holding pool names (the real one is exercised
in tests/integration/railyard); the conf dir is a temp dir.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from railyard import apply, documents
from railyard.apply import Options
from railyard.cli import main
from railyard.confdir import ConfDir
from railyard.ipamd_link import ApplyReport, IpamdError

SEED = Path(__file__).parent / "seed"
POOL = (SEED / "02-roce-pool-and-network.yaml").read_text().split("---")[0]


def network(name: str, pool: str, resource: str = "spidernet.io/gpu1sriov") -> str:
    return f"""
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderMultusConfig
metadata: {{name: {name}, namespace: spiderpool}}
spec:
  cniType: sriov
  sriov: {{resourceName: {resource}, enableRdma: true, ippools: {{ipv4: [{pool}]}}}}
"""


class FakeIpamd:
    """Pools by name; ``refuse`` makes the real (not dry-run) apply fail."""

    def __init__(self, *pools: str, refuse: str = "") -> None:
        self.pools = set(pools)
        self.refuse = refuse
        self.calls: list[bool] = []  # dry_run of each ApplyPools

    def pool_names(self) -> set[str]:
        return set(self.pools)

    def apply(self, manifest: str, dry_run: bool) -> ApplyReport:
        self.calls.append(dry_run)
        names = [d["metadata"]["name"] for d in yaml.safe_load_all(manifest)]
        if self.refuse and not dry_run:
            raise IpamdError(f"ipamd refused: {self.refuse}")
        created = tuple(f"SpiderIPPool/{n}" for n in names if n not in self.pools)
        if not dry_run:
            self.pools |= set(names)
        return ApplyReport(created=created, dry_run=dry_run)


def run(text: str, ipamd: FakeIpamd, conf_dir: Path, **opts: object) -> apply.Plan:
    docs = documents.load([("in.yaml", text)])
    options = Options(conf_dir=conf_dir, **opts)  # type: ignore[arg-type]
    plan = apply.plan(docs, ipamd, options)
    apply.execute(plan, ipamd, options)
    return plan


def test_pools_then_networks(tmp_path: Path) -> None:
    ipamd = FakeIpamd()
    plan = run(POOL + "---" + network("gpu1-sriov", "gpu1-net11"), ipamd, tmp_path)
    assert ipamd.calls == [True, False]  # validated by ipamd first
    assert ipamd.pools == {"gpu1-net11"}
    conf = json.loads((tmp_path / "gpu1-sriov.conflist").read_text())
    assert [p["type"] for p in conf["plugins"]] == ["sriov", "rdma"]
    assert [c.status for c in plan.conf_changes] == ["created"]


def test_one_bad_network_changes_nothing(tmp_path: Path) -> None:
    ipamd = FakeIpamd()
    text = (
        POOL
        + "---"
        + network("gpu1-sriov", "gpu1-net11")
        + "---"
        + network("gpu2-sriov", "gpu2-net12")
    )
    with pytest.raises(apply.ApplyError) as failed:
        run(text, ipamd, tmp_path)
    assert "pool gpu2-net12 does not exist" in failed.value.errors[0]
    assert ipamd.calls == [] and ipamd.pools == set()
    assert list(tmp_path.iterdir()) == []


def test_every_error_is_reported_at_once(tmp_path: Path) -> None:
    text = network("a", "nope1") + "---" + network("b", "nope2", resource="''")
    with pytest.raises(apply.ApplyError) as failed:
        run(text, FakeIpamd(), tmp_path)
    assert len(failed.value.errors) == 2
    assert "no spec.sriovConfig[resourceName] specified" in failed.value.errors[0]
    assert "pool nope1 does not exist" in failed.value.errors[1]


def test_ipamd_refusing_the_pools_writes_no_network(tmp_path: Path) -> None:
    ipamd = FakeIpamd(refuse="pool gpu1-net11 has allocations in 172.16.0.0/16")
    text = POOL + "---" + network("gpu1-sriov", "gpu1-net11")
    with pytest.raises(apply.ApplyError) as failed:
        run(text, ipamd, tmp_path)
    assert failed.value.errors == [
        "ipamd refused: pool gpu1-net11 has allocations in 172.16.0.0/16; "
        "no network was written"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_pool_already_in_ipamd_is_enough(tmp_path: Path) -> None:
    ipamd = FakeIpamd("gpu1-net11")
    run((SEED / "05-mtu-network.yaml").read_text(), ipamd, tmp_path)
    assert ipamd.calls == []  # no pool in the file: nothing sent
    assert (tmp_path / "gpu1-sriov.conflist").exists()


def test_reapply_is_unchanged_and_a_change_is_configured(tmp_path: Path) -> None:
    ipamd = FakeIpamd("gpu1-net11")
    text = (SEED / "02-roce-pool-and-network.yaml").read_text()
    run(text, ipamd, tmp_path)
    again = run(text, ipamd, tmp_path)
    assert [c.status for c in again.conf_changes] == ["unchanged"]
    changed = run((SEED / "05-mtu-network.yaml").read_text(), ipamd, tmp_path)
    assert [c.status for c in changed.conf_changes] == ["configured"]


def test_a_conflist_railyard_did_not_write_is_never_overwritten(tmp_path: Path) -> None:
    foreign = tmp_path / "gpu1-sriov.conflist"
    foreign.write_text('{"name": "gpu1-sriov"}')
    ipamd = FakeIpamd()
    with pytest.raises(apply.ApplyError) as failed:
        run(POOL + "---" + network("gpu1-sriov", "gpu1-net11"), ipamd, tmp_path)
    assert "was not written by railyard" in failed.value.errors[0]
    assert foreign.read_text() == '{"name": "gpu1-sriov"}'
    assert ipamd.calls == [True]  # only the dry run


def test_two_networks_with_one_conflist_name_are_refused(tmp_path: Path) -> None:
    text = (
        network("gpu1-sriov", "gpu1-net11")
        + "---"
        + network("gpu1-sriov", "gpu1-net11").replace(
            "namespace: spiderpool", "namespace: other"
        )
    )
    with pytest.raises(apply.ApplyError) as failed:
        run(text, FakeIpamd("gpu1-net11"), tmp_path)
    assert (
        "conflist name gpu1-sriov is also used by spiderpool/gpu1-sriov"
        in (failed.value.errors[0])
    )


def test_device_id_pins_the_vf_and_checks_the_pf_mtu(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    pf_net = sysfs / "bus/pci/devices/0000:10:00.2/physfn/net/pf0"
    pf_net.mkdir(parents=True)
    (pf_net / "mtu").write_text("4500\n")
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    ipamd = FakeIpamd("gpu1-net11")
    text = (SEED / "05-mtu-network.yaml").read_text()
    opts = {
        "device_ids": {"spidernet.io/gpu1sriov": "0000:10:00.2"},
        "sysfs_root": sysfs,
    }
    with pytest.raises(apply.ApplyError) as failed:
        run(text, ipamd, conf_dir, **opts)
    assert failed.value.errors == [
        "in.yaml document 1: SpiderMultusConfig spiderpool/gpu1-sriov: "
        "mtu 8000 is above the MTU of the PF (4500)"
    ]
    (pf_net / "mtu").write_text("9000\n")
    run(text, ipamd, conf_dir, **opts)
    plugins = json.loads((conf_dir / "gpu1-sriov.conflist").read_text())["plugins"]
    assert [p.get("deviceID") for p in plugins] == ["0000:10:00.2"] * 2 + [None]


def test_get_and_delete_networks(tmp_path: Path) -> None:
    run(
        (SEED / "02-roce-pool-and-network.yaml").read_text(),
        FakeIpamd("gpu1-net11"),
        tmp_path,
    )
    cli = CliRunner()
    listed = cli.invoke(main, ["get", "networks", "--cni-conf-dir", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    header, row = listed.output.splitlines()
    assert header.split() == ["NAME", "TYPE", "RESOURCE", "POOLS", "FROM"]
    assert row.split() == [
        "gpu1-sriov",
        "sriov",
        "spidernet.io/gpu1sriov",
        "gpu1-net11",
        "spiderpool/gpu1-sriov",
    ]
    gone = cli.invoke(
        main, ["delete", "network", "gpu1-sriov", "--cni-conf-dir", str(tmp_path)]
    )
    assert gone.exit_code == 0, gone.output
    assert not (tmp_path / "gpu1-sriov.conflist").exists()
    assert ConfDir(tmp_path).records() == []
    again = cli.invoke(
        main, ["delete", "network", "gpu1-sriov", "--cni-conf-dir", str(tmp_path)]
    )
    assert again.exit_code == 1
    assert "network gpu1-sriov not found" in again.output


def test_cli_takes_several_files_and_stdin_and_prints_nads(tmp_path: Path) -> None:
    cli = CliRunner()
    result = cli.invoke(
        main,
        [
            "apply",
            "--no-ipamd",
            "-o",
            "yaml",
            "-f",
            str(SEED / "02-roce-pool-and-network.yaml"),
            "-f",
            "-",
            "-f",
            str(SEED / "08-node-policy.yaml"),
        ],
        input=network("gpu2-sriov", "gpu1-net11", resource="spidernet.io/gpu2sriov"),
    )
    assert result.exit_code == 0, result.output
    nads = list(yaml.safe_load_all(result.stdout))
    assert [n["metadata"]["name"] for n in nads] == ["gpu1-sriov", "gpu2-sriov"]
    assert "SriovNetworkNodePolicy" in result.stderr and "skipped" in result.stderr
    # -o yaml alone writes no conflist anywhere
    assert list(tmp_path.iterdir()) == []


def test_cli_nad_out_and_dry_run(tmp_path: Path) -> None:
    cli = CliRunner()
    args = ["apply", "--no-ipamd", "-f", str(SEED / "04-inject-network.yaml")]
    dry = cli.invoke(main, [*args, "--nad-out", str(tmp_path / "nads"), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would be written" in dry.stdout
    assert not (tmp_path / "nads").exists()
    real = cli.invoke(main, [*args, "--nad-out", str(tmp_path / "nads")])
    assert real.exit_code == 0, real.output
    nad = yaml.safe_load((tmp_path / "nads/spiderpool.gpu1-sriov.yaml").read_text())
    assert nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] == (
        "spidernet.io/gpu1rdma"
    )


def test_cli_error_is_one_line_without_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "apply",
            "--no-ipamd",
            "--cni-conf-dir",
            str(tmp_path),
            "-f",
            str(SEED / "01-ib-pool-and-network.yaml"),
        ],
    )
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith("error: ")
    assert "gpu1-net91" in result.stderr
    assert "Traceback" not in result.output


def test_a_bad_pool_is_refused_with_ipamds_reason_before_anything(
    tmp_path: Path,
) -> None:
    bad = POOL.replace("172.16.11.1-172.16.11.200", "10.9.0.1-10.9.0.5")
    ipamd = FakeIpamd()
    with pytest.raises(apply.ApplyError) as failed:
        run(bad + "---" + network("gpu1-sriov", "gpu1-net11"), ipamd, tmp_path)
    pool_error, network_error = failed.value.errors
    assert pool_error == (
        "in.yaml document 1: SpiderIPPool gpu1-net11: '10.9.0.1-10.9.0.5' not "
        "pertains to the 'spec.subnet' 172.16.0.0/16"
    )
    # an invalid pool is no pool: the network naming it is reported too
    assert "pool gpu1-net11 does not exist" in network_error
    assert ipamd.calls == [] and list(tmp_path.iterdir()) == []


def test_get_networks_as_json(tmp_path: Path) -> None:
    run((SEED / "04-inject-network.yaml").read_text(), FakeIpamd(), tmp_path)
    listed = CliRunner().invoke(
        main, ["get", "networks", "--cni-conf-dir", str(tmp_path), "-o", "json"]
    )
    assert json.loads(listed.stdout) == [
        {
            "name": "gpu1-sriov",
            "source": "spiderpool/gpu1-sriov",
            "cniType": "sriov",
            "resourceName": "spidernet.io/gpu1rdma",
            "pools": ["gpu1-net11"],
            "file": str(tmp_path / "gpu1-sriov.conflist"),
        }
    ]


def test_webhook_without_the_kubernetes_client_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "kubernetes" else real(name, *a),
    )
    pem = tmp_path / "tls.pem"
    pem.write_text("")
    result = CliRunner().invoke(
        main, ["webhook", "serve", "--cert", str(pem), "--key", str(pem)]
    )
    assert result.exit_code == 1
    assert "pip install 'railyard-cni[webhook]'" in result.stderr
