"""``plan --out FILE`` and ``apply FILE`` (Terraform's ``plan -out`` / ``apply PLANFILE``): the file
is private and redacted, apply does exactly what was reviewed, and refuses, touching nothing, when
the spec file or a planned node moved since. On simulated nodes (tests/converge/simulated.py)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuforge.cli import app
from gpuforge.deploy.runlog import run_files
from gpuforge.deploy.secrets import SecretStore
from gpuforge.orchestrate.applied_record import last_applied
from gpuforge.orchestrate.saved_plan import FORMAT, file_sha256
from gpuforge.spec.cluster import load_cluster
from tests import yaml_text
from tests.cli.test_confirm_and_verbose import changed_anything
from tests.converge.simulated import SimulatedCluster

SLURM_CONF = r"cat .*/etc/slurm/slurm\.conf"


def saved(spec_file: Path, tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "reviewed.plan"
    res = CliRunner().invoke(app, ["plan", str(spec_file), "--out", str(out), *args])
    assert res.exit_code == 0, res.output
    assert f"saved the plan to {out}: 'gpuforge apply {out}' applies exactly it" in " ".join(res.stderr.split())
    return out


def reset(cluster: SimulatedCluster) -> None:
    """Forget what the plan sent (it only read facts), to see what apply sends."""
    cluster.commands.clear()
    cluster.uploads.clear()


def test_the_plan_file_is_private_and_records_what_proves_the_cluster_did_not_move(
    spec_file: Path, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    out = saved(spec_file, tmp_path, "--limit", "node[2-3]", "--tags", "slurm")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    doc = json.loads(out.read_text())
    assert doc["format"] == FORMAT and doc["spec"] == str(spec_file.resolve())
    assert doc["spec_sha256"] == file_sha256(spec_file)
    assert (doc["limit"], doc["tags"], doc["skip_tags"]) == ("node[2-3]", "slurm", None)
    assert sorted(doc["digests"]["nodes"]) == ["node2", "node3"] and len(doc["digests"]["cluster"]) == 64
    assert sorted(doc["plan"]["hosts"]) == ["node2", "node3"] and doc["plan"]["tags"] == ["slurm"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".reviewed.plan.")]  # renamed into place


def test_the_plan_file_shows_secrets_as_the_plan_does(
    spec_file: Path, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    import base64

    out = saved(spec_file, tmp_path)
    text = out.read_text()
    key = SecretStore("gflab").munge_key()  # the key the plan would push (made before any node is read)
    for shown in (key.hex(), base64.b64encode(key).decode(), key[:24].hex()):
        assert shown not in text
    assert "secret content (not shown)" in text


def test_apply_of_the_plan_file_applies_it_without_asking(
    spec_file: Path, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    out = saved(spec_file, tmp_path)
    reset(cluster)
    res = CliRunner().invoke(app, ["apply", str(out)])  # stdin is not a terminal: no --yes needed
    assert res.exit_code == 0, res.output
    assert "Plan: 3 of 3 node(s) to change" in res.stderr and "Apply these changes?" not in res.stderr
    assert changed_anything(cluster) and last_applied(load_cluster(spec_file)) is not None and len(run_files()) == 1


def test_a_plan_file_keeps_its_limit(spec_file: Path, cluster: SimulatedCluster, tmp_path: Path) -> None:
    out = saved(spec_file, tmp_path, "--limit", "node2")
    reset(cluster)
    res = CliRunner().invoke(app, ["apply", str(out)])
    assert res.exit_code == 0, res.output
    assert "Plan: 1 of 1 node(s) to change" in res.stderr
    assert set(cluster.uploads) == {"node2"}


def test_a_changed_spec_file_is_refused_and_nothing_is_touched(
    spec_file: Path, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    out = saved(spec_file, tmp_path)
    data = yaml.safe_load(spec_file.read_text())
    data["node_groups"][1]["hardware"]["real_memory_mb"] = 2000
    spec_file.write_text(yaml_text.dump(data, sort_keys=False))
    reset(cluster)
    res = CliRunner().invoke(app, ["apply", str(out)])
    assert res.exit_code == 2, res.output
    text = " ".join(res.stderr.split())
    assert f"{spec_file.resolve()} changed since the plan was made (sha256 " in text
    assert "nothing was applied; plan again and review it" in text
    assert not cluster.commands and not cluster.uploads and run_files() == []


def test_a_node_that_moved_is_named_and_nothing_is_touched(
    spec_file: Path, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    out = saved(spec_file, tmp_path)
    cluster.respond(SLURM_CONF, ["# edited by hand on the node", "ClusterName=elsewhere"], host="node3")
    reset(cluster)
    res = CliRunner().invoke(app, ["apply", str(out)])
    assert res.exit_code == 2, res.output
    text = res.stderr
    assert f"{spec_file}: the cluster moved since the plan was made; nothing was applied; plan again:\n" in text
    assert "  node3: its state differs: apply would now do something else there" in text
    assert "node1:" not in text.split("plan again:")[1] and "node2:" not in text.split("plan again:")[1]
    assert not changed_anything(cluster) and run_files() == [] and last_applied(load_cluster(spec_file)) is None


def test_an_unreachable_node_is_a_moved_one(spec_file: Path, cluster: SimulatedCluster, tmp_path: Path) -> None:
    out = saved(spec_file, tmp_path)
    cluster.unreachable.add("node2")
    res = CliRunner().invoke(app, ["apply", str(out)])
    assert res.exit_code == 2, res.output
    assert "  node2: unreachable over SSH" in res.stderr
    assert last_applied(load_cluster(spec_file)) is None


@pytest.mark.parametrize("option", [["--limit", "node1"], ["--tags", "slurm"], ["--skip-tags", "nvidia"]])
def test_a_plan_file_refuses_options_that_would_change_it(
    spec_file: Path, cluster: SimulatedCluster, tmp_path: Path, option: list[str]
) -> None:
    out = saved(spec_file, tmp_path)
    reset(cluster)
    res = CliRunner().invoke(app, ["apply", str(out), *option])
    assert res.exit_code == 2
    assert "is a saved plan: it has its own --limit/--tags/--skip-tags; plan again to change them" in res.stderr
    assert not cluster.commands


def test_a_damaged_plan_file_is_refused(spec_file: Path, cluster: SimulatedCluster, tmp_path: Path) -> None:
    out = saved(spec_file, tmp_path)
    out.write_text(out.read_text()[:200])
    res = CliRunner().invoke(app, ["apply", str(out)])
    assert res.exit_code == 2 and "not a plan file gpuforge plan --out wrote" in res.stderr
    assert "Traceback" not in res.output


def test_fresh_plans_are_not_saved(spec_file: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["plan", str(spec_file), "--fresh", "--out", str(tmp_path / "x.plan")])
    assert res.exit_code == 2 and "--out: a --fresh plan connects to no node" in res.stderr
    assert not (tmp_path / "x.plan").exists()


def test_a_plan_with_an_unreachable_node_is_not_saved(
    spec_file: Path, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    cluster.unreachable.add("node1")
    out = tmp_path / "x.plan"
    res = CliRunner().invoke(app, ["plan", str(spec_file), "--out", str(out)])
    assert res.exit_code == 1 and f"{out}: not saved: 1 node(s) could not be planned" in res.stderr
    assert not out.exists()


def test_a_fifo_given_to_apply_is_not_waited_on(tmp_path: Path) -> None:
    import os

    from gpuforge.orchestrate.saved_plan import read_apply_input
    from gpuforge.spec.bounded_read import InputFileError

    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError, match="refused: a device, FIFO or socket"):
        read_apply_input(fifo)  # returns at once: no writer is waited for
    res = CliRunner().invoke(app, ["apply", "--yes", str(fifo)])
    assert res.exit_code == 2 and "not a regular file" in res.output


def test_a_spec_changed_while_planning_is_not_saved(
    spec_file: Path, cluster: SimulatedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuforge.orchestrate import plan as plan_module

    real = plan_module.plan

    def edited_meanwhile(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        spec_file.write_text(spec_file.read_text() + "# edited while the plan ran\n")
        return result

    monkeypatch.setattr(plan_module, "plan", edited_meanwhile)
    out = tmp_path / "x.plan"
    res = CliRunner().invoke(app, ["plan", str(spec_file), "--out", str(out)])
    assert res.exit_code == 2 and f"{spec_file} changed while the plan was made: not saved; plan again" in res.stderr
    assert not out.exists()
