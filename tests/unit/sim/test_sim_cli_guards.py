# SPDX-License-Identifier: Apache-2.0
"""railyard-sim's guards and help, runnable without root (no lab is built)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ipamd.cli import main as ipamd_main
from railyard_sim.cli import hand_run_env
from railyard_sim.cli import main as sim_main
from railyard_sim.lab import SIM_MARKER, Lab, plan


def tree_of(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text() if p.is_file() else "<dir>"
        for p in sorted(root.rglob("*"))
    }


def test_down_refuses_a_directory_without_the_lab_marker_and_touches_nothing(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    (work / "state").mkdir(parents=True)
    (work / "state" / "keep.json").write_text("{}")
    (work / "lab.json").write_text('{"not": "a lab"}')
    (work / "pods").mkdir()
    before = tree_of(work)

    res = CliRunner().invoke(sim_main, ["down", "--lab", str(work)])

    assert res.exit_code != 0
    assert "not a lab directory" in res.output and SIM_MARKER in res.output
    assert tree_of(work) == before


def test_down_of_a_directory_that_does_not_exist_is_a_no_op(tmp_path: Path) -> None:
    res = CliRunner().invoke(sim_main, ["down", "--lab", str(tmp_path / "none")])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "none").exists()


def test_the_hand_run_environment_names_launchers_socket_and_state(
    tmp_path: Path,
) -> None:
    lab = Lab(tmp_path, plan("beef", tmp_path, rails=1, vfs_per_pf=1, ib_rails=0))
    env = hand_run_env(lab)
    assert env["CNI_PATH"].split(":")[0] == str(tmp_path / "cni-bin")
    assert env["RAILYARD_IPAMD_SOCKET"] == str(tmp_path / "ipamd.sock")
    assert env["RAILYARD_STATE_DIR"] == str(tmp_path / "state")


@pytest.mark.parametrize(
    ("cli", "argv"),
    [
        (sim_main, []),
        (sim_main, ["up"]),
        (sim_main, ["pod"]),
        (sim_main, ["demo"]),
        (sim_main, ["down"]),
        (ipamd_main, []),
        (ipamd_main, ["pool"]),
        (ipamd_main, ["serve"]),
    ],
)
def test_dash_h_prints_help_on_every_command(cli: object, argv: list[str]) -> None:
    res = CliRunner().invoke(cli, [*argv, "-h"])  # type: ignore[arg-type]
    assert res.exit_code == 0, res.output
    assert res.output.startswith("Usage: ")


def test_pod_and_demo_share_their_pod_defaults() -> None:
    def defaults(name: str) -> dict[str, object]:
        cmd = sim_main.commands[name]  # type: ignore[attr-defined]
        return {p.name: p.default for p in cmd.params if p.name != "lab_dir"}

    pod, demo = defaults("pod"), defaults("demo")
    shared = {k: v for k, v in demo.items() if k in pod}
    assert shared == {k: v for k, v in pod.items() if k != "name"}
    assert pod["rdma"] is True and pod["ipv6"] is True and pod["ib_guid"] is True


def test_up_passes_the_kernel_seams_asked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from railyard_sim import cli

    seen: dict[str, object] = {}
    monkeypatch.setattr(cli, "need_root", lambda: None)
    monkeypatch.setattr(cli, "do_up", lambda *args, **kw: seen.update(kw))
    argv = [
        "up",
        "--lab",
        str(tmp_path),
        "--kernel-seam",
        "vf",
        "--kernel-seam",
        "rdma",
    ]
    res = CliRunner().invoke(sim_main, argv)
    assert res.exit_code == 0, res.output
    assert seen["kernel_seams"] == frozenset({"vf", "rdma"})
    res = CliRunner().invoke(
        sim_main, ["up", "--lab", str(tmp_path), "--kernel-seam", "pci"]
    )
    assert res.exit_code != 0 and "'pci' is not one of 'vf', 'rdma'" in res.output


def test_netdevsim_pfs_on_a_kernel_without_netdevsim_are_refused_clearly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from railyard_sim import kernel_seams

    monkeypatch.setattr(kernel_seams, "NSIM_BUS", tmp_path / "no-netdevsim")
    with pytest.raises(
        kernel_seams.KernelSeamError, match="no netdevsim on this kernel"
    ):
        kernel_seams.add_netdevsim_pf(2)
