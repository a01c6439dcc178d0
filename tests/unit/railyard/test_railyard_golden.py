# SPDX-License-Identifier: Apache-2.0
"""Golden renderings of the reference guide's documents (seed/, verbatim).

For every SpiderMultusConfig of the guide, the conflist a node gets and the
NetworkAttachmentDefinition a cluster gets are pinned byte for byte in
golden/. The guide's own slips are pinned too: 01 names a pool that does not
exist (gpu1-net91; its pool is gpu1-net11) and applies once fixed; 03 is a
fragment (a literal ``...`` for elided fields).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from railyard import apply, documents, render
from railyard.apply import Options, Rendered
from railyard.ipamd_link import ApplyReport
from railyard.network import parse

HERE = Path(__file__).parent
SEED = HERE / "seed"
GOLDEN = HERE / "golden"


def seed(name: str) -> str:
    return (SEED / name).read_text()


# The network-bearing documents, as the guide has them or completed where the
# guide is incomplete (each completion is spelled out here).
CASES = {
    "01-ib-pool-and-network-fixed": seed("01-ib-pool-and-network.yaml").replace(
        "gpu1-net91", "gpu1-net11"
    ),
    "02-roce-pool-and-network": seed("02-roce-pool-and-network.yaml"),
    # 03 with the elided fields filled in: the resource and the pool of 01
    "03-ib-pkey-network-completed": seed("03-ib-pkey-network.yaml").replace(
        "        ...\n",
        "        resourceName: spidernet.io/gpu1sriov\n"
        "        ippools:\n"
        '          ipv4: ["gpu1-net11"]\n',
    ),
    "04-inject-network": seed("04-inject-network.yaml"),
    "05-mtu-network": seed("05-mtu-network.yaml"),
}


class PoolsOf:
    """ipamd holding the given pools (what ``railyard apply`` asks of it)."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)
        self.applied: list[tuple[str, bool]] = []

    def pool_names(self) -> set[str]:
        return set(self.names)

    def apply(self, manifest: str, dry_run: bool) -> ApplyReport:
        self.applied.append((manifest, dry_run))
        return ApplyReport(dry_run=dry_run)


def rendered(text: str, source: str = "seed.yaml") -> Rendered:
    (doc,) = documents.load([(source, text)]).networks
    net = parse(doc.body)
    return Rendered(net, render.conflist(net), render.nad(net))


@pytest.mark.parametrize("case", sorted(CASES))
def test_seed_renders_the_pinned_conflist_and_nad(case: str) -> None:
    result = rendered(CASES[case])
    expected_conflist = (GOLDEN / f"{case}.conflist.json").read_text()
    expected_nad = (GOLDEN / f"{case}.nad.yaml").read_text()

    assert json.dumps(result.conflist, indent=2) + "\n" == expected_conflist
    assert apply.nads_yaml([result]) == expected_nad
    # the NAD carries exactly the conflist, compact as Go's json.Marshal
    nad = yaml.safe_load(expected_nad)
    assert json.loads(nad["spec"]["config"]) == json.loads(expected_conflist)
    assert ": " not in nad["spec"]["config"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_seed_plans_cleanly_against_an_ipamd_holding_gpu1_net11(
    case: str, tmp_path: Path
) -> None:
    docs = documents.load([(case, CASES[case])])
    plan = apply.plan(docs, PoolsOf("gpu1-net11"), Options(conf_dir=tmp_path))
    assert [c.status for c in plan.conf_changes] == ["created"]


def test_02_guide_enable_rdma_yields_the_rdma_plugin() -> None:
    # Spiderpool prunes enableRdma today, so its rendering lacks rdma
    result = rendered(CASES["02-roce-pool-and-network"])
    assert [p["type"] for p in result.conflist["plugins"]] == ["sriov", "rdma"]
    assert result.nad["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/resourceName": "spidernet.io/gpu1sriov"
    }


def test_04_pools_at_spec_level_and_inject_annotation_copied_to_a_label() -> None:
    result = rendered(CASES["04-inject-network"])
    assert result.conflist["plugins"][0]["ipam"]["default_ipv4_ippool"] == [
        "gpu1-net11"
    ]
    labels = result.nad["metadata"]["labels"]
    assert labels["cni.spidernet.io/rdma-resource-inject"] == "rdma-network"


def test_05_mtu_becomes_a_trailing_tuning_plugin() -> None:
    result = rendered(CASES["05-mtu-network"])
    assert result.conflist["plugins"][-1] == {"type": "tuning", "mtu": 8000}


def test_01_as_written_fails_naming_the_missing_pool(tmp_path: Path) -> None:
    docs = documents.load([("01.yaml", seed("01-ib-pool-and-network.yaml"))])
    ipamd = PoolsOf()
    with pytest.raises(apply.ApplyError) as failed:
        apply.plan(docs, ipamd, Options(conf_dir=tmp_path))
    (error,) = failed.value.errors
    assert "pool gpu1-net91 does not exist" in error
    assert "did you mean gpu1-net11?" in error
    assert ipamd.applied == []  # not even a dry run: nothing was sent
    assert list(tmp_path.iterdir()) == []


def test_03_as_written_is_a_yaml_error_at_the_elided_line() -> None:
    with pytest.raises(documents.DocumentError) as failed:
        documents.load([("03.yaml", seed("03-ib-pkey-network.yaml"))])
    assert str(failed.value) == (
        "03.yaml: malformed YAML: line 10, column 9: while scanning a simple key: "
        "could not find expected ':'"
    )


def test_03_without_the_ellipsis_lacks_its_resource(tmp_path: Path) -> None:
    text = seed("03-ib-pkey-network.yaml").replace("        ...\n", "")
    docs = documents.load([("03.yaml", text)])
    with pytest.raises(apply.ApplyError) as failed:
        apply.plan(docs, PoolsOf("gpu1-net11"), Options(conf_dir=tmp_path))
    assert failed.value.errors == [
        "03.yaml document 1: SpiderMultusConfig spiderpool/ib-sriov: "
        "no spec.ibsriovConfig[resourceName] specified"
    ]


def test_03_pkey_written_as_a_number_keeps_the_digits_as_hex() -> None:
    result = rendered(CASES["03-ib-pkey-network-completed"])
    assert result.conflist["plugins"][0]["pkey"] == "1000"


@pytest.mark.parametrize(
    "name", ["06-pod-annotations.yaml", "07-inject-pod.yaml", "08-node-policy.yaml"]
)
def test_non_network_seed_documents_are_reported_and_skipped(
    name: str, tmp_path: Path
) -> None:
    docs = documents.load([(name, seed(name))])
    plan = apply.plan(docs, PoolsOf(), Options(conf_dir=tmp_path))
    (reason,) = plan.skipped
    assert reason.startswith(f"{name} document 1")
    assert reason.endswith("skipped")
    assert plan.networks == [] and plan.conf_changes == []


def test_08_names_its_kind_when_skipped(tmp_path: Path) -> None:
    docs = documents.load([("08.yaml", seed("08-node-policy.yaml"))])
    plan = apply.plan(docs, PoolsOf(), Options(conf_dir=tmp_path))
    assert plan.skipped == [
        "08.yaml document 1 (SriovNetworkNodePolicy gpu1-nic-policy): kind "
        "SriovNetworkNodePolicy (sriovnetwork.openshift.io/v1) is not railyard's: "
        "skipped"
    ]


@pytest.mark.parametrize("version", ["0.3.1", "1.0.0", "1.1.0"])
def test_spec_cni_version_renders_the_pinned_conflist_at_that_version(
    version: str,
) -> None:
    text = seed("02-roce-pool-and-network.yaml").replace(
        "  cniType: sriov\n", f'  cniVersion: "{version}"\n  cniType: sriov\n'
    )
    pinned = json.loads((GOLDEN / "02-roce-pool-and-network.conflist.json").read_text())
    assert pinned["cniVersion"] == "1.0.0"  # the default
    assert rendered(text).conflist == {**pinned, "cniVersion": version}


def test_hijack_cidr_is_rendered_and_only_keys_without_an_equivalent_warn(
    tmp_path: Path,
) -> None:
    text = seed("02-roce-pool-and-network.yaml").replace(
        "  cniType: sriov\n",
        "  coordinator:\n"
        "    hijackCIDR: [10.96.0.0/12, 10.244.0.0/16]\n"
        "    podMACPrefix: 0a:1b\n"
        "  cniType: sriov\n",
    )
    docs = documents.load([("02-hijack.yaml", text)])
    plan = apply.plan(docs, PoolsOf("gpu1-net11"), Options(conf_dir=tmp_path))
    (network,) = plan.networks
    assert network.conflist["plugins"][0]["hijackCIDR"] == [
        "10.96.0.0/12",
        "10.244.0.0/16",
    ]
    assert [w for w in plan.warnings if "coordinator" in w] == [
        "02-hijack.yaml document 2: SpiderMultusConfig spiderpool/gpu1-sriov: "
        "coordinator podMACPrefix have no equivalent in railyard's plugins and "
        "are ignored"
    ]
