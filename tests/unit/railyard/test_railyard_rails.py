# SPDX-License-Identifier: Apache-2.0
"""``railyard rails``: the pairing and affinity levels on the simulated host's
server shapes and on small hand-built trees, its outputs, and bad sysfs.

The trees are the simulator's fake sysfs (``railyard_sim.pci_tree`` and
``railyard_sim.shapes``) in a temp dir: plain files and relative links.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from cni.kernel.topology import Affinity
from railyard.cli import main
from railyard.rails import RailsError, discover, pair
from railyard_sim.pci_tree import CLASS_INFINIBAND, PciTree
from railyard_sim.shapes import build, shape


def shaped(root: Path, name: str) -> Path:
    """A node of shape ``name`` whose NIC k is mlx5_k, ens<k>f0, 16 VFs max."""
    tree = PciTree(root)
    for k, (pci, (parent, numa)) in enumerate(build(tree, shape(name)).items()):
        tree.pf(pci, f"ens{k}f0", 4, parent=parent, numa_node=numa, totalvfs=16)
        tree.rdma(pci, f"mlx5_{k}")
    return root


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One dgx node for the tests that only read it."""
    return shaped(tmp_path_factory.mktemp("dgx"), "dgx")


def rails_cli(*args: str) -> Result:
    return CliRunner().invoke(main, ["rails", *args])


def test_dgx_pairs_gpu_n_with_the_nic_on_its_switch(dgx: Path) -> None:
    pairing = pair(discover(dgx))
    host = pairing.host
    paired = [(r.number, r.gpu.index, r.nic.rdma_device) for r in pairing.rails]
    assert paired == [(n, n - 1, f"mlx5_{n - 1}") for n in range(1, 9)]
    assert {r.affinity for r in pairing.rails} == {Affinity.PIX}
    assert pairing.notes == []
    gpu0 = host.gpus[0]
    levels = [host.affinity(gpu0, nic).name for nic in host.nics]
    # Both NICs of its switch are PIX (the tie the rule breaks by "fewest
    # GPUs so far, then lowest PCI address"), the other switch of its
    # socket NODE, the other socket SYS.
    assert levels == ["PIX", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]


def test_split_server_shares_near_nics_and_says_so(tmp_path: Path) -> None:
    pairing = pair(discover(shaped(tmp_path, "split")))
    paired = [(r.gpu.index, r.nic.rdma_device, r.affinity.name) for r in pairing.rails]
    assert paired == [
        (0, "mlx5_0", "PHB"), (1, "mlx5_1", "PHB"),
        (2, "mlx5_0", "NODE"), (3, "mlx5_1", "NODE"),
    ]  # fmt: skip
    assert pairing.notes == [
        "GPU 0 and GPU 2 share NIC mlx5_0 (0000:19:00.0) and its bandwidth",
        "GPU 1 and GPU 3 share NIC mlx5_1 (0000:3c:00.0) and its bandwidth",
        "NIC mlx5_2 (0000:af:00.0) serves no GPU",
        "NIC mlx5_3 (0000:d8:00.0) serves no GPU",
    ]


def test_two_switch_levels_are_pxb_and_a_gpu_across_sockets_gets_no_rail(
    tmp_path: Path,
) -> None:
    tree = PciTree(tmp_path)
    rc = tree.host_bridge("0000:00")
    port = tree.bridge(rc, "0000:00:01.0", 0)
    top = tree.bridge(port, "0000:01:00.0", 0, switch=True)
    left = tree.bridge(tree.bridge(top, "0000:02:00.0", 0, switch=True),
                       "0000:03:00.0", 0, switch=True)  # fmt: skip
    right = tree.bridge(tree.bridge(top, "0000:02:01.0", 0, switch=True),
                        "0000:04:00.0", 0, switch=True)  # fmt: skip
    tree.gpu(tree.bridge(left, "0000:05:00.0", 0, switch=True), "0000:06:00.0", 0)
    nic_port = tree.bridge(right, "0000:05:01.0", 0, switch=True)
    tree.pf("0000:07:00.0", "ens1", 2, parent=nic_port, numa_node=0)
    tree.rdma("0000:07:00.0", "mlx5_0")
    far = tree.bridge(tree.host_bridge("0000:80"), "0000:80:01.0", 1)
    tree.gpu(far, "0000:81:00.0", 1)

    pairing = pair(discover(tmp_path))
    assert [(r.gpu.pci, r.affinity.name) for r in pairing.rails] == [
        ("0000:06:00.0", "PXB")
    ]
    assert pairing.notes == [
        "GPU 1 (0000:81:00.0) has no NIC on its socket (closest: mlx5_0 "
        "0000:07:00.0, SYS): no rail"
    ]


def test_table_json_and_yaml_of_the_dgx_shape(dgx: Path) -> None:
    root = dgx
    table = rails_cli("--sysfs", str(root))
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[1].split() == ["GPU0", "PIX", "PIX", "NODE", "NODE",
                                "SYS", "SYS", "SYS", "SYS",
                                "0", "pci0000:15"]  # fmt: skip
    assert (
        "1     GPU0  0000:18:00.0  NIC0  0000:19:00.0  mlx5_0  PIX (same PCIe switch)"
        in lines
    )

    as_json = json.loads(rails_cli("--sysfs", str(root), "--json").output)
    assert as_json["rails"][7] == {
        "rail": 8, "gpu": "0000:bb:00.0", "nic": "0000:bc:00.0",
        "rdmaDevice": "mlx5_7", "affinity": "PIX",
    }  # fmt: skip
    assert as_json["gpus"][4]["numaNode"] == 1

    out = rails_cli("--sysfs", str(root), "-o", "yaml", "--node", "n1",
                    "--roce-tos", "106", "--rdma-name", "gpu{rail}_rdma")  # fmt: skip
    assert out.exit_code == 0, out.output
    docs = list(yaml.safe_load_all(out.output))
    kinds = [d["kind"] for d in docs]
    assert (
        kinds
        == ["SriovNetworkNodePolicy"] * 8 + ["SpiderIPPool", "SpiderMultusConfig"] * 8
    )
    policy = docs[2]["spec"]
    assert policy["nicSelector"] == {
        "vendor": "15b3", "deviceID": "101d", "rootDevices": ["0000:3a:00.0"]
    }  # fmt: skip
    assert (policy["resourceName"], policy["numVfs"], policy["linkType"],
            policy["isRdma"]) == ("gpu3sriov", 4, "eth", True)  # fmt: skip
    network = docs[8 + 5]  # rail 3's SpiderMultusConfig
    assert network["metadata"]["name"] == "gpu3-sriov"
    assert network["spec"]["sriov"]["resourceName"] == "spidernet.io/gpu3sriov"
    assert json.loads(network["spec"]["chainCNIJsonData"][0]) == {
        "type": "rdma", "rdmaDevName": "gpu3_rdma", "roceTos": 106
    }  # fmt: skip


def test_shared_nic_has_one_policy_and_both_rails_use_its_resource(
    tmp_path: Path,
) -> None:
    out = rails_cli("--sysfs", str(shaped(tmp_path, "split")), "-o", "yaml",
                    "--node", "n1")  # fmt: skip
    docs = list(yaml.safe_load_all(out.stdout))
    policies = [d for d in docs if d["kind"] == "SriovNetworkNodePolicy"]
    assert [p["spec"]["nicSelector"]["rootDevices"] for p in policies] == [
        ["0000:19:00.0"],
        ["0000:3c:00.0"],
    ]
    networks = {
        d["metadata"]["name"]: d for d in docs if d["kind"] == "SpiderMultusConfig"
    }
    assert (
        networks["gpu3-sriov"]["spec"]["sriov"]["resourceName"]
        == "spidernet.io/gpu1sriov"
    )


def test_an_infiniband_pf_gets_an_ib_sriov_network(tmp_path: Path) -> None:
    tree = PciTree(tmp_path)
    port = tree.bridge(tree.host_bridge("0000:00"), "0000:00:01.0", 0)
    tree.gpu(port, "0000:01:00.0", 0)
    tree.pf(
        "0000:01:00.1", "ib0", 2, parent=port, numa_node=0, pci_class=CLASS_INFINIBAND
    )
    tree.rdma("0000:01:00.1", "mlx5_0", kind="ib")
    docs = list(yaml.safe_load_all(rails_cli("--sysfs", str(tmp_path), "-o", "yaml",
                                             "--node", "n").stdout))  # fmt: skip
    assert docs[0]["spec"]["linkType"] == "ib"
    assert docs[2]["spec"]["cniType"] == "ib-sriov"


@pytest.mark.parametrize(
    "damage, message",
    [
        ("nothing", "no GPU under"),
        ("numa", "0000:18:00.0: cannot read numa_node"),
        ("link_layer", "RDMA device mlx5_0 has no port 1 link_layer"),
        ("flat", "is not a link into devices/"),
    ],
)
def test_bad_sysfs_is_one_clear_error(
    tmp_path: Path, damage: str, message: str
) -> None:
    root = tmp_path / "sys"
    if damage == "flat":
        tree = PciTree(root)  # the simulated host's flat tree: no topology
        tree.pf("0000:10:00.0", "ens1", 2)
        (tree.device("0000:10:00.0") / "class").write_text("0x030200\n")
        (tree.device("0000:10:00.0") / "vendor").write_text("0x10de\n")
        (tree.device("0000:10:00.0") / "numa_node").write_text("0\n")
    elif damage != "nothing":
        shaped(root, "dgx")
        victim = {
            "numa": root / "bus/pci/devices/0000:18:00.0/numa_node",
            "link_layer": root / "bus/pci/devices/0000:19:00.0/infiniband"
            / "mlx5_0/ports/1/link_layer",
        }[damage]  # fmt: skip
        victim.unlink()
    else:
        (root / "bus" / "pci" / "devices").mkdir(parents=True)
    out = rails_cli("--sysfs", str(root))
    assert out.exit_code == 1
    assert out.output.startswith("error: ") and message in out.output
    assert "Traceback" not in out.output
    with pytest.raises(RailsError):
        discover(root)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rdma-name", "x" * 64 + "{rail}"], "takes at most 63"),
        (["--rdma-name", "rail {rail}"], "is not valid"),
        (["--roce-tos", "256"], "out of range 0-255"),
    ],
)
def test_bad_options_are_refused(dgx: Path, args: list[str], message: str) -> None:
    out = rails_cli("--sysfs", str(dgx), "-o", "yaml", *args)
    assert out.exit_code == 1 and message in out.output, out.output
