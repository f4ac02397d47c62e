"""``--tags``/``--skip-tags`` on plan and apply (Ansible's names for layers), and ``--limit '!node'``.

The rule that keeps running work safe: a run with tags changes only nodes that have no rolling
change pending, never drains, reboots or resumes a node, and records nothing as applied; the next
full apply compares with the last full one and rolls what is still pending.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuforge.deploy.runlog import run_files
from gpuforge.orchestrate.applied_record import (
    RolloutRecord,
    last_applied,
    load_rollout_record,
    save_rollout_record,
    spec_text,
)
from gpuforge.orchestrate.apply import apply
from gpuforge.orchestrate.plan import plan
from gpuforge.spec import load_spec, resolve_nodes, select_limit
from gpuforge.spec.cluster import Cluster, load_cluster
from gpuforge.spec.layer_tags import TAGS, LayerSelection, TagError, select_layers
from tests import yaml_text
from tests.conftest import REPO, run_cli
from tests.converge.simulated import SimulatedCluster, simulated, write_simulated_spec
from tests.converge.stub_slurm import StubSlurm
from tests.helpers import inventory

#: The layers (Layer names in a plan) each deploy layer holds, on the example cluster's nodes.
NVIDIA = {"nvidia-repos", "nvidia-driver", "container-engine", "nvidia-container-toolkit", "enroot", "pyxis"}
NVIDIA |= {"nvidia-dcgm", "mig"}


def test_tags_are_the_layers_and_site() -> None:
    assert TAGS == (
        "base", "packages", "storage", "munge", "nvidia", "fabric", "kubernetes", "slurm", "monitoring", "health",
        "site",
    )  # fmt: skip
    assert select_layers(None, None) is None
    assert select_layers("slurm, base", None) == LayerSelection(("base", "slurm"), site_steps=False)
    assert select_layers(None, "nvidia,site") == LayerSelection(
        ("base", "packages", "storage", "munge", "fabric", "kubernetes", "slurm", "monitoring", "health"),
        site_steps=False,
    )
    assert select_layers("slurm,site", "slurm") == LayerSelection((), site_steps=True)


@pytest.mark.parametrize(
    ("tags", "skip", "message"),
    [
        ("slrum", None, "--tags: unknown tag 'slrum'; did you mean 'slurm'? the tags: base, packages, storage, munge,"),
        (None, "nvida", "--skip-tags: unknown tag 'nvida'; did you mean 'nvidia'? the tags: "),
        ("zzz", None, "--tags: unknown tag 'zzz'; the tags: base, packages"),
        (",", None, "--tags: names no tag; the tags: "),
        ("slurm", "slurm", "--skip-tags: leaves nothing to run"),
    ],
)
def test_a_bad_tag_is_refused_naming_the_option(tags: str | None, skip: str | None, message: str) -> None:
    with pytest.raises(TagError) as info:
        select_layers(tags, skip)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("command", ["plan", "apply"])
def test_cli_unknown_tag_exits_2_with_did_you_mean_and_the_list(tmp_path: Path, command: str) -> None:
    spec = REPO / "inventories" / "lab-slurm-minimal.yaml"
    cp = run_cli(command, str(spec), "--tags", "monitoring,slrum", env={"GPUFORGE_STATE_DIR": str(tmp_path)})
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "Traceback" not in cp.stderr
    text = " ".join(cp.stderr.split())
    assert "--tags: unknown tag 'slrum'; did you mean 'slurm'? the tags: base, packages, storage, munge," in text
    assert "monitoring, health, site" in text


def test_cli_tags_with_allow_reboot_is_refused(tmp_path: Path) -> None:
    spec = REPO / "inventories" / "lab-slurm-minimal.yaml"
    cp = run_cli("apply", str(spec), "--yes", "--tags", "nvidia", "--allow-reboot", env={"GPUFORGE_STATE_DIR": "x"})
    assert cp.returncode == 2
    assert "--allow-reboot: a run with --tags/--skip-tags never drains or reboots a node" in cp.stderr


def test_limit_takes_exclusions() -> None:
    h100 = inventory("slurm-h100")
    names = select_limit(h100, "!gpu001")
    assert "gpu001" not in names and len(names) == len(resolve_nodes(h100)) - 1
    assert select_limit(h100, "gpu[001-004],!gpu002,!gpu004") == ["gpu001", "gpu003"]


# ---------------------------------------------------------------------------- on simulated nodes


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """inventories/slurm-h100.yaml (69 nodes) on simulated nodes; state under tmp_path."""
    from tests.converge.test_simulated_runs import ARTIFACT_PINS

    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["sources"]["artifact_sha256"] = ARTIFACT_PINS
    data["rollout"] = {"batch_size": 40, "drain_timeout": 60}
    path = write_simulated_spec(data, tmp_path, "hopper.yaml")
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    return path


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedCluster:
    return simulated(monkeypatch, tmp_path)


def _layers(result_hosts: dict[str, list], node: str) -> list[str]:
    return [op.layer for op in result_hosts[node]]


def test_plan_with_tags_plans_those_layers_only(spec_file: Path, cluster: SimulatedCluster) -> None:
    full = plan(load_cluster(spec_file), limit="gpu001,ctl01")
    skipped = plan(load_cluster(spec_file), limit="gpu001,ctl01", layers=select_layers(None, "nvidia"))
    only = plan(load_cluster(spec_file), limit="gpu001,ctl01", layers=select_layers("base,slurm", None))
    for node in ("gpu001", "ctl01"):
        assert _layers(skipped.hosts, node) == [x for x in _layers(full.hosts, node) if x not in NVIDIA]
        assert set(_layers(only.hosts, node)) == {"base"} | {x for x in _layers(full.hosts, node) if "slurm" in x}
    assert NVIDIA & set(_layers(full.hosts, "gpu001"))
    doc = only.as_dict()
    assert doc["tags"] == ["base", "slurm"] and full.as_dict()["tags"] is None


@pytest.fixture
def rolling(spec_file: Path, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> StubSlurm:
    """A first apply recorded, then a driver change (rolling on the 64 GPU nodes) and a live one
    (a new login shell default: every node's accounts)."""
    from gpuforge.orchestrate import apply as apply_module
    from gpuforge.orchestrate import remote, slurm_drain

    assert apply(load_cluster(spec_file)).ok
    data = yaml.safe_load(spec_file.read_text())
    data["versions"]["driver"]["version"] = "570.172.08"
    spec_file.write_text(yaml_text.dump(data, sort_keys=False))
    slurm = StubSlurm(tmp_path / "slurm", "ctl01", [n.name for n in resolve_nodes(load_spec(spec_file))])
    monkeypatch.setattr(remote, "run", slurm.remote_run)
    monkeypatch.setattr(slurm_drain, "POLL_S", 0.2)
    monkeypatch.setattr(apply_module, "validate_nodes", lambda _p, _nodes: {})
    cluster.commands.clear()
    cluster.uploads.clear()
    return slurm


def test_tagged_apply_leaves_rolling_nodes_alone_and_records_nothing(
    spec_file: Path, cluster: SimulatedCluster, rolling: StubSlurm
) -> None:
    before = last_applied(load_cluster(spec_file))
    assert before is not None and before.versions.driver is not None
    result = apply(load_cluster(spec_file), layers=select_layers(None, "nvidia"))  # skip the layer holding the change
    gpus = [f"gpu{i:03d}" for i in range(1, 65)]
    assert result.ok
    assert set(result.waiting) == set(gpus)
    assert result.waiting["gpu001"].startswith("a rolling change (versions.driver.version) is pending: left alone")
    assert not set(gpus) & set(cluster.commands)  # not even read: never touched
    assert {"ctl01", "login01", "mon01"} <= set(result.hosts)
    assert not [line for line in rolling.log() if "State=" in line]  # nothing drained or resumed
    # Nothing recorded: the applied spec is the old one; the rollout record lists no converged node.
    after = last_applied(load_cluster(spec_file))
    assert after is not None and after.versions.driver == before.versions.driver
    record, _ = load_rollout_record(load_cluster(spec_file))
    assert record.converged == [] and record.drained == []
    # The next full apply still rolls the driver change, drained batch by batch, and records it.
    full = apply(load_cluster(spec_file))
    assert full.ok and not full.waiting, {n: h.error for n, h in full.hosts.items() if h.error}
    assert len([line for line in rolling.log() if "State=DRAIN" in line]) == 2
    recorded = last_applied(load_cluster(spec_file))
    assert recorded is not None and recorded.versions.driver is not None
    assert recorded.versions.driver.version == "570.172.08"
    # The run logs: the tagged run's says which layers and nothing about drains; the full one's
    # has each batch's drain, validation and resume, and the record.
    tagged_log, full_log = ([json.loads(x) for x in p.read_text().splitlines()] for p in run_files()[-2:])
    assert tagged_log[0]["layers"] == [t for t in TAGS if t != "nvidia"]
    assert not {"drain", "resume", "recorded"} & {e["event"] for e in tagged_log}
    waiting = [e for e in tagged_log if e["event"] == "node" and e["result"] == "waiting"]
    assert len(waiting) == 64 and waiting[0]["waiting"].startswith("a rolling change (versions.driver.version)")
    events = [(e["event"], len(e.get("nodes", []))) for e in full_log if e["event"] in ("drain", "validate", "resume")]
    assert events == [("drain", 40), ("validate", 40), ("resume", 40), ("drain", 24), ("validate", 24), ("resume", 24)]
    assert any(e["event"] == "recorded" for e in full_log)


def test_tags_never_resume_a_node_an_interrupted_rollout_left_drained(
    spec_file: Path, cluster: SimulatedCluster, rolling: StubSlurm
) -> None:
    spec = load_spec(spec_file)
    save_rollout_record(load_cluster(spec_file), RolloutRecord(drained=["mon01"], spec=spec_text(spec), converged=[]))
    result = apply(load_cluster(spec_file), limit="mon01,login01", layers=select_layers("monitoring", None))
    assert result.waiting == {
        "mon01": "left drained by an interrupted rollout: apply without --tags/--skip-tags finishes it"
    }
    assert "mon01" not in cluster.commands and "login01" in cluster.commands
    assert not [line for line in rolling.log() if "State=" in line]
    record, _ = load_rollout_record(load_cluster(spec_file))
    assert record.drained == ["mon01"]  # still gpuforge's to give back, by a full apply


def test_tagged_first_apply_records_nothing_as_applied(spec_file: Path, cluster: SimulatedCluster) -> None:
    result = apply(load_cluster(spec_file), limit="ctl01,gpu001", layers=select_layers("base", None))
    assert result.ok and not result.waiting
    assert last_applied(load_cluster(spec_file)) is None
    ops = {s for n in ("ctl01", "gpu001") for s in result.hosts[n].changed}
    assert ops and all(op.startswith("base:") for op in ops), ops


def test_cli_plan_limit_exclusion_and_tags(spec_file: Path, cluster: SimulatedCluster) -> None:
    from typer.testing import CliRunner

    from gpuforge.cli import app

    args = ["plan", str(spec_file), "--limit", "mon01,login01,!login01", "--tags", "base", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert list(doc["hosts"]) == ["mon01"] and doc["tags"] == ["base"]
    assert {op["layer"] for op in doc["hosts"]["mon01"]["operations"]} == {"base"}


@pytest.mark.parametrize(
    ("tags", "skip", "walked", "stepped"),
    [
        (
            None,
            None,
            [
                ("base", "packages", "storage", "munge", "nvidia", "fabric", "kubernetes", "slurm"),
                ("monitoring", "health"),
            ],
            True,
        ),
        ("slurm,site", None, [("slurm",)], True),
        ("monitoring,site", None, [("monitoring",)], True),
        ("site", None, [], True),
        ("slurm,monitoring", None, None, False),
        (None, "site", None, False),
    ],
)
def test_site_steps_and_segments_follow_the_tags(
    monkeypatch: pytest.MonkeyPatch,
    tags: str | None,
    skip: str | None,
    walked: list[tuple[str, ...]] | None,
    stepped: bool,
) -> None:
    """A spec with a site step after slurm: the layer segments walked are cut down to the chosen
    layers (an empty one is not run), and the step runs only with the ``site`` tag."""
    from gpuforge.deploy.run import ApplyResult, HostResult
    from gpuforge.deploy.runstate import RunState
    from gpuforge.extensions.ansible_run import HostOutcome, StepOutcome
    from gpuforge.orchestrate import site_steps
    from gpuforge.orchestrate.apply import new_run
    from gpuforge.spec import parse_spec

    data = yaml.safe_load((REPO / "inventories" / "lab-slurm-minimal.yaml").read_text())
    data["site"] = {"ansible": [{"name": "baseline", "role": "roles/x", "after": "slurm"}]}
    spec = parse_spec(yaml_text.dump(data))
    runs: list[tuple[str, ...] | None] = []
    steps: list[str] = []

    def run_site(_cluster: object, names: list[str], run: RunState, _say: object) -> ApplyResult:
        runs.append(run.layers)
        return ApplyResult({n: HostResult(n) for n in names})

    def run_step(_spec: object, _dir: object, step: object, targets: list[str], **_kw: object) -> StepOutcome:
        steps.append(step.name)  # type: ignore[attr-defined]
        return StepOutcome(step.name, {n: HostOutcome(ok=1) for n in targets})  # type: ignore[attr-defined]

    monkeypatch.setattr(site_steps, "run_site", run_site)
    monkeypatch.setattr(site_steps, "run_step", run_step)
    monkeypatch.setattr(site_steps, "vagrant_hosts", lambda *_a: {})
    run = new_run(None, select_layers(tags, skip))
    if not run.site_steps:  # run_deploys leaves the steps out: one plain run of the chosen layers
        assert walked is None and run.layers == select_layers(tags, skip).layers  # type: ignore[union-attr]
        return
    result = site_steps.run_with_site_steps(Cluster.of(spec, "spec.yaml"), ["node1", "node2"], run)
    assert runs == walked and steps == (["baseline"] if stepped else [])
    assert sorted(result.hosts) == ["node1", "node2"] and result.ok
    assert run.layers == (None if tags is None and skip is None else select_layers(tags, skip).layers)  # type: ignore[union-attr]
