"""A whole campaign through a real shell against stub Slurm tools (tests/acceptance/stub_slurm.py):
submit, wait, collect, judge, outliers, drains, spares, replace; operators' drains are never undone."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuforge.acceptance import replace, results, slurm_actions, spares, tools
from gpuforge.acceptance.campaign import Cluster, run_campaign
from gpuforge.spec import Spec
from gpuforge.spec.cluster import Cluster as Loaded
from tests.acceptance.stub_slurm import StubSlurm

HEALTH_STUB = """#!/bin/sh
if [ "$STUB_HEALTH_FAIL" = "$SLURMD_NODENAME" ]; then
  echo '{"ok": false, "results": [{"id": "monitoring.node_exporter", "status": "fail",'\\
' "message": "node-exporter: connection refused on :9100"}]}'
  exit 1
fi
echo '{"ok": true, "results": [{"id": "scheduler.munge", "status": "pass", "message": "munged runs"}]}'
"""


def fast(spares_: list[dict[str, Any]] | None = None, partitions: list[dict[str, Any]] | None = None) -> Callable:
    def mutate(d: dict[str, Any]) -> None:
        d["acceptance"] = {"steps": {"cpu": {"seconds": 1}, "memory": {"seconds": 1}}, "start_timeout_s": 30}
        if spares_ is not None:
            d["acceptance"]["spares"] = spares_
        if partitions is not None:
            d["slurm"]["partitions"] = partitions

    return mutate


@pytest.fixture(autouse=True)
def health_stub(stub: StubSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    stub.tool("gpuforge-health", HEALTH_STUB)
    monkeypatch.setattr(tools, "HEALTH_PROGRAM", str(stub.bin / "gpuforge-health"))


def campaign(spec: Spec, path: Path, stub: StubSlurm, **kw: Any) -> results.Campaign:
    return run_campaign(Loaded.of(spec, path), transport=stub, poll_s=0.05, **kw)


SPARE_PARTS = [{"name": "batch", "nodes": "node[1-2]", "default": True}, {"name": "spare", "nodes": "node3"}]


def test_campaign_slow_node_is_an_outlier_failed_node_is_drained(stub: StubSlurm, spec_at: Callable) -> None:
    spec, path = spec_at(fast())
    for n in ("node1", "node2", "node3"):
        stub.set_node(n, partitions=["batch"])
    stub.env.update(STUB_RATES="node1=2142.64,node2=2190.29,node3=457.97", STUB_HEALTH_FAIL="node2")
    camp = campaign(spec, path, stub)
    doc = camp.to_dict()
    assert {n["node"]: n["status"] for n in doc["nodes"]} == {"node1": "pass", "node2": "fail", "node3": "outlier"}
    assert [c.split()[0] for c in stub.calls()].count("sbatch") == 1, "one job for the partition"
    found = [(o.node, o.step, o.metric, o.value, o.median) for o in camp.outliers]
    assert found == [("node3", step, "bogo_ops_per_s", 457.97, 2142.64) for step in ("cpu", "memory")]
    node2 = stub.read()["nodes"]["node2"]
    assert node2["state"] == "drained"
    assert node2["reason"].startswith("gpuforge: accept: health: monitoring.node_exporter failed")
    assert camp.actions == [{"action": "drain", "node": "node2", "reason": node2["reason"], "result": "drained"}]
    assert {s["step"] for s in doc["nodes"][0]["steps"]} == {"health", "cpu", "memory", "container"}
    assert doc["nodes"][0]["steps"][-1]["status"] == "skip", "pyxis is off in the lab spec"
    assert stub.read()["nodes"]["node3"]["state"] == "idle", "an outlier is reported, not drained"
    assert camp.exit_code == 1


def test_report_only_fails_the_node_and_drains_nothing(stub: StubSlurm, spec_at: Callable) -> None:
    """``gpuforge accept --no-act``: the same judgement, no drain."""
    spec, path = spec_at(fast())
    for n in ("node1", "node2", "node3"):
        stub.set_node(n, partitions=["batch"])
    stub.env.update(STUB_HEALTH_FAIL="node2")
    camp = campaign(spec, path, stub, act=False)
    assert camp.node("node2").status == "fail"  # type: ignore[union-attr]
    assert stub.read()["nodes"]["node2"]["state"] == "idle" and camp.actions == []
    assert not [c for c in stub.calls() if c.startswith("scontrol update")]


def test_nodes_out_of_service_are_left_alone(stub: StubSlurm, spec_at: Callable) -> None:
    spec, path = spec_at(fast())
    stub.set_node("node2", state="drained", reason="rack 4 power work [ops@2026-11-25T10:00:00]")
    stub.env.update(STUB_HEALTH_FAIL="node2")
    camp = campaign(spec, path, stub)
    n2 = camp.node("node2")
    assert n2 is not None and n2.status == "untested" and "rack 4 power work" in (n2.untested or "")
    assert stub.read()["nodes"]["node2"]["reason"] == "rack 4 power work [ops@2026-11-25T10:00:00]"
    job = next(c for c in stub.calls() if c.startswith("scontrol -o show job"))
    assert job and "node2" not in json.dumps(stub.read()["jobs"]), "node2 was not in the job"


def test_drain_never_replaces_an_operators_reason(stub: StubSlurm) -> None:
    stub.set_node("node1", state="drained", reason="RMA ticket 991")
    stub.set_node("node2", state="draining", reason="gpuforge: accept: cpu: old")
    drains = [
        slurm_actions.drain_command("node1", "gpuforge: accept: cpu: slow"),
        slurm_actions.drain_command("node2", "gpuforge: accept: cpu: new"),
        slurm_actions.drain_command("node3", "gpuforge: accept: x: 'quoted' $(id)"),
    ]
    out = stub.run(None, "\n".join(drains))
    marks = slurm_actions.parse_marks(out.stdout, "GFDRAIN")
    assert marks["node1"] == ("kept", "RMA ticket 991") and marks["node2"][0] == "drained"
    nodes = stub.read()["nodes"]
    assert nodes["node1"]["reason"] == "RMA ticket 991"
    assert nodes["node2"]["reason"] == "gpuforge: accept: cpu: new"
    assert nodes["node3"]["reason"] == "gpuforge: accept: x: 'quoted' $(id)", "the reason reached scontrol as text"
    resumed = stub.run(None, slurm_actions.resume_command("node1") + "\n" + slurm_actions.resume_command("node2"))
    assert slurm_actions.parse_marks(resumed.stdout, "GFRESUME") == {"node1": ("kept", "RMA ticket 991"),
                                                                     "node2": ("resumed", "")}  # fmt: skip
    assert stub.read()["nodes"]["node1"]["state"] == "drained"


def test_a_spare_moves_in_when_a_node_fails_and_the_swap_is_recorded(
    stub: StubSlurm, spec_at: Callable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    spec, path = spec_at(fast([{"partition": "batch", "nodes": "node3", "size": 2}], SPARE_PARTS))
    stub.env.update(STUB_HEALTH_FAIL="node2")
    camp = campaign(spec, path, stub)
    assert {g.name: g.nodes for g in camp.groups} == {"batch": ["node1", "node2"], "spare": ["node3"]}
    replace.restore_capacity(Cluster(Loaded.of(spec, path), stub), spec, camp)
    state = stub.read()
    assert state["partitions"]["batch"] == ["node1", "node2", "node3"] and state["nodes"]["node2"]["state"] == "drained"
    why = "node2 is out of service (drained: " + state["nodes"]["node2"]["reason"] + ")"
    assert camp.actions[-1] == {
        "action": "spare-in", "partition": "batch", "spare": "node3", "replaces": "node2", "reason": why,
        "result": "moved",
    }  # fmt: skip
    record = spares.load_record("gflab")
    assert record.moved_in == {"batch": ["node3"]} and record.swaps[0]["campaign"] == camp.id
    results.save(camp)

    # node1 asked to be replaced: drained, but the pool is empty now
    out = replace.replace_node(Cluster(Loaded.of(spec, path), stub), spec, "node1")
    assert not out.ok and "no healthy spare left" in out.message
    assert stub.read()["nodes"]["node1"]["reason"] == "gpuforge: replace: taken out by gpuforge replace"

    # node2 repaired: tested alone in a reservation, passes, joins the spare pool
    stub.env.pop("STUB_HEALTH_FAIL")
    back, retest = replace.return_node(Cluster(Loaded.of(spec, path), stub), "node2", poll_s=0.05)
    assert back.ok, back.message
    assert retest is not None and retest.node("node2").status == "pass"  # type: ignore[union-attr]
    state = stub.read()
    assert state["partitions"]["batch"] == ["node1", "node3"] and "node2" in state["partitions"]["spare"]
    assert state["nodes"]["node2"]["state"] == "idle" and state["reservations"] == {}
    assert any("--reservation=gpuforge-accept-node2" in line or "create reservation" in line for line in stub.calls())
    assert spares.load_record("gflab").returned == {"batch": ["node2"]}


def test_replace_keeps_an_operators_drain_and_still_brings_a_spare(
    stub: StubSlurm, spec_at: Callable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    spec, path = spec_at(fast([{"partition": "batch", "nodes": "node3", "size": 2}], SPARE_PARTS))
    results.save(campaign(spec, path, stub))  # everyone healthy: node3 is a healthy spare
    stub.set_node("node1", state="drained", reason="DIMM swap (ops)")
    out = replace.replace_node(Cluster(Loaded.of(spec, path), stub), spec, "node1")
    assert out.ok, out.message
    assert stub.read()["nodes"]["node1"]["reason"] == "DIMM swap (ops)"
    assert stub.read()["partitions"]["batch"] == ["node1", "node2", "node3"]
    back, _ = replace.return_node(Cluster(Loaded.of(spec, path), stub), "node1", poll_s=0.05)
    assert not back.ok and "not drained by gpuforge" in back.message
    assert stub.read()["nodes"]["node1"]["reason"] == "DIMM swap (ops)" and stub.read()["reservations"] == {}


def test_controller_unreachable_is_an_error_not_a_drain(stub: StubSlurm, spec_at: Callable) -> None:
    spec, path = spec_at(fast())
    (stub.root / "fail-sinfo").write_text("")
    camp = campaign(spec, path, stub)
    assert camp.exit_code == 2 and all(n.status == "untested" for n in camp.nodes)
    assert "sinfo on node1 failed" in camp.problems[0]
    assert not [c for c in stub.calls() if c.startswith(("sbatch", "scontrol update"))]


def test_leaf_nccl_output_is_judged_per_leaf(spec_at: Callable) -> None:
    """The batch output of a GPU job: each node's report, then the recorded 2-node all_reduce_perf of leaf1."""
    from gpuforge.acceptance import batch, node_runner
    from gpuforge.acceptance.campaign import judge_group
    from gpuforge.acceptance.results import GroupRun
    from tests.acceptance.conftest import fixture

    spec, _ = spec_at(fast())
    group = batch.JobGroup("batch", "batch", None, ("node1", "node2"), (("node1", 8), ("node2", 8)),
                           (("node1", "leaf1"), ("node2", "leaf1")))  # fmt: skip
    assert batch.leaf_sets(group) == {"leaf1": ["node1", "node2"]}
    lines = [f"{i}: {x}" for i, n in enumerate(("node1", "node2")) for x in node_runner.encode(n, {"steps": []})]
    lines += [f"GFLEAF leaf1 {x}" for x in fixture("nccl_2node_16gpu.json")["stdout"].splitlines()]
    lines += ["GFSTEP nccl_leaf.leaf1 rc=0 seconds=61", "GFEND 1"]
    out = batch.decode_output("\n".join(lines), ["node1", "node2"])
    _, steps = judge_group(spec, group, GroupRun("batch", "batch", None, ["node1", "node2"], "7"), out)
    assert [(s.step, s.status, s.metrics["busbw_gbps"], s.duration_s) for s in steps] == [
        ("nccl_leaf.leaf1", "pass", 338.82, 61)
    ]
