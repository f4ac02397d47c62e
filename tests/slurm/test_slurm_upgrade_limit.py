"""``slurm-upgrade --plan`` (the steps, nothing changed) and ``--limit`` (the shared selector; never
an upgrade of slurmd before slurmdbd and slurmctld, never a controller limited away silently), on
the stand-in cluster of tests/slurm/stub_upgrade.py and on plans made by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuforge.cli import app
from gpuforge.orchestrate import slurm_upgrade_cli
from gpuforge.orchestrate.slurm_upgrade import UpgradePlan, UpgradeRefused, plan_upgrade, run_upgrade
from gpuforge.orchestrate.slurm_upgrade_limit import limit_upgrade
from gpuforge.spec import Spec
from tests import yaml_text
from tests.slurm.stub_upgrade import StubCluster
from tests.slurm.test_slurm_upgrade import io_for, upgrade_spec

CHANGES = ("systemctl stop", "systemctl start", "apt-get install", "mysqldump")


@pytest.fixture
def cluster(tmp_path: Path) -> StubCluster:
    """ctl1 (slurmdbd, slurmctld) and cpu[1-3] on Slurm 22.05.8; the repository offers 23.02.7."""
    (tmp_path / "state").mkdir()
    nodes = {"ctl1": ["slurmdbd", "slurmctld"], "cpu1": ["slurmd"], "cpu2": ["slurmd"], "cpu3": ["slurmd"]}
    return StubCluster(tmp_path / "stub", nodes, ["ctl1"], running="22.05.8", repo="23.02.7")


def spec_file(tmp_path: Path) -> Path:
    spec = upgrade_spec(tmp_path, version="23.02.7")  # the stub's repository's version: done nodes read as done
    path = tmp_path / "spec.yaml"
    path.write_text(yaml_text.dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False))
    return path


def invoke(tmp_path: Path, cluster: StubCluster, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(slurm_upgrade_cli, "io_for", lambda c: io_for(cluster, tmp_path, [], []))
    res = CliRunner().invoke(app, ["slurm-upgrade", str(spec_file(tmp_path)), *args])
    return res.exit_code, res.stdout, res.stderr


def changed(cluster: StubCluster) -> list[str]:
    return [line for line in cluster.log() if any(c in line for c in CHANGES)]


def test_plan_prints_the_steps_and_changes_nothing(
    tmp_path: Path, cluster: StubCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = invoke(tmp_path, cluster, monkeypatch, "--plan")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Slurm 22.05.8 -> 23.02.7 (ctl1, cpu1, cpu2, cpu3 not there yet)")
    assert lines[1].startswith("1. ctl1: stop slurmdbd, dump database slurm_acct_db under ")
    assert lines[2].startswith("2. ctl1: stop slurmctld, archive StateSaveLocation under ")
    assert lines[3].startswith("3. compute batch 1/2 cpu[1-2]: stop slurmd, upgrade, start it (not drained")
    assert lines[4].startswith("4. compute batch 2/2 cpu3: ")
    assert "Upgrade?" not in out and not changed(cluster)
    assert {n: s["version"] for n, s in cluster.read()["nodes"].items()} == dict.fromkeys(
        ["ctl1", "cpu1", "cpu2", "cpu3"], "22.05.8"
    )


def test_a_limit_that_would_upgrade_slurmd_first_is_refused(
    tmp_path: Path, cluster: StubCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = invoke(tmp_path, cluster, monkeypatch, "--limit", "cpu", "--yes")
    assert code == 2
    text = " ".join(err.split())
    assert "refused: --limit would upgrade Slurm on cpu[1-3] before slurmdbd on ctl1 and slurmctld on ctl1" in text
    assert "add ctl1 to --limit, or upgrade them first with --limit ctl1" in text
    assert not changed(cluster)


def test_a_limit_that_names_no_node_is_the_shared_selectors_error(
    tmp_path: Path, cluster: StubCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = invoke(tmp_path, cluster, monkeypatch, "--limit", "gpu99", "--plan")
    assert code == 2 and "--limit" in err and "gpu99" in err
    assert not cluster.log()  # refused before anything connects


def test_a_limited_upgrade_moves_the_controller_first_and_the_next_one_finishes(
    tmp_path: Path, cluster: StubCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = invoke(tmp_path, cluster, monkeypatch, "--limit", "ctl,cpu1", "--yes")
    assert code == 0, err
    assert "--limit: cpu[2-3] keep Slurm 22.05.8 for now; slurm-upgrade again with them finishes the upgrade" in out
    assert "Slurm 23.02.7 on the selected nodes" in out
    versions = {n: s["version"] for n, s in cluster.read()["nodes"].items()}
    assert versions == {"ctl1": "23.02.7", "cpu1": "23.02.7", "cpu2": "22.05.8", "cpu3": "22.05.8"}
    code, out, err = invoke(tmp_path, cluster, monkeypatch, "--limit", "cpu[2-3]", "--yes")
    assert code == 0, err
    assert "--limit: slurmdbd on ctl1 left as it is (already at 23.02.7)" in out
    assert "--limit: slurmctld on ctl1 left as it is (already at 23.02.7)" in out
    assert "1. compute batch 1/1 cpu[2-3]: " in out
    versions = {n: s["version"] for n, s in cluster.read()["nodes"].items()}
    assert set(versions.values()) == {"23.02.7"}
    assert len([line for line in cluster.log() if line.startswith("ctl1 mysqldump")]) == 1  # the first run's


def hand_plan(pending: list[str] | None = None) -> UpgradePlan:
    """db1 (slurmdbd), ctl[1-2] (slurmctld), cpu[1-3] (slurmd), login1 (clients)."""
    everyone = ["db1", "ctl1", "ctl2", "cpu1", "cpu2", "cpu3", "login1"]
    return UpgradePlan(
        "23.02.7", "23.11.4", "db1", ["ctl1", "ctl2"], [["cpu1", "cpu2"], ["cpu3"]], ["login1"], "/b",
        package="23.11.4-1", pending=everyone if pending is None else pending,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("selected", "refusal"),
    [
        (["ctl1", "cpu1"], "--limit names the controller(s) ctl1 but not ctl2: every slurmctld is stopped"),
        (["ctl1", "ctl2"], "--limit would upgrade slurmctld before slurmdbd on db1 (SchedMD's order"),
        (["db1", "cpu1"], "--limit would upgrade Slurm on cpu1 before slurmctld on ctl1, ctl2"),
        (["login1"], "--limit would upgrade Slurm on login1 before slurmdbd on db1 and slurmctld on ctl1, ctl2"),
    ],
)
def test_limits_that_break_schedmds_order_are_refused(selected: list[str], refusal: str) -> None:
    with pytest.raises(UpgradeRefused, match=re.escape(refusal)):
        limit_upgrade(hand_plan(), selected, 2)


def test_a_limit_to_slurmdbd_alone_says_what_is_left() -> None:
    plan, notes = limit_upgrade(hand_plan(), ["db1"], 2)
    assert plan.batches == [] and plan.others == [] and plan.pending == ["db1"]
    assert notes == [
        "--limit: cpu[1-3],ctl[1-2],login1 keep Slurm 23.02.7 for now; slurm-upgrade again with them finishes the "
        "upgrade"
    ]


def test_compute_alone_once_the_daemons_above_are_upgraded() -> None:
    plan, notes = limit_upgrade(hand_plan(pending=["cpu1", "cpu2", "cpu3", "login1"]), ["cpu3"], 2)
    assert plan.batches == [["cpu3"]] and set(plan.left_out) >= {"db1", "ctl1", "ctl2"}
    assert "--limit: slurmdbd on db1 left as it is (already at 23.11.4-1)" in notes
    assert "--limit: slurmctld on ctl1, ctl2 left as it is (already at 23.11.4-1)" in notes


def test_a_half_done_upgrade_in_the_wrong_order_is_still_refused(tmp_path: Path, cluster: StubCluster) -> None:
    """What --limit cannot leave (slurmd newer than slurmctld) reads as before: refused."""
    state = cluster.read()
    state["nodes"]["cpu2"]["version"] = "23.02.7"
    cluster.update(nodes=state["nodes"])
    spec: Spec = upgrade_spec(tmp_path)
    with pytest.raises(UpgradeRefused, match="different Slurm versions"):
        run_upgrade(spec, io_for(cluster, tmp_path, [], []), plan_upgrade(spec, io_for(cluster, tmp_path, [], [])))
