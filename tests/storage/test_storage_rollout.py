"""A rolling storage change drains only the nodes whose own mount units change, end to end through
``apply``: the drain, wait and resume commands run in a real ``sh`` against the stand-in Slurm
controller (``tests/converge/stub_slurm.py``), whose jobs end over time.

The deploys are a recorder: when a node is deployed it compares the mount units the node has (as
rendered from the spec it last got) with the new spec's; a compute node whose units change must be
drained then, with no job running, and deployed by a rollout batch (``RunState.drained``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy.run import ApplyResult, HostResult
from gpuforge.orchestrate import apply as apply_mod
from gpuforge.orchestrate import remote, slurm_drain
from gpuforge.orchestrate.applied_record import last_applied, record_applied
from gpuforge.orchestrate.rollout import plan_rollout
from gpuforge.orchestrate.slurm_drain import DRAIN_TAG
from gpuforge.render.storage import node_units
from gpuforge.spec import load_spec, parse_spec
from gpuforge.spec.cluster import Cluster, load_cluster
from tests import yaml_text
from tests.converge.simulated import lock_nodes_locally
from tests.converge.stub_slurm import StubSlurm
from tests.helpers import INVENTORIES

WORKERS = ["node2", "node3", "node4", "node5"]


def spec_data() -> dict[str, Any]:
    """node1 controller, node[2-5] compute; /scratch on node[2-3], /home on every node, /site (external)."""
    data = yaml.safe_load((INVENTORIES / "lab-slurm-minimal.yaml").read_text())
    data["node_groups"][1]["hosts"] = "node[2-5]"
    data["rollout"] = {"batch_size": 2, "drain_timeout": 20}
    data["storage"] = {
        "mounts": [
            {"name": "scratch", "path": "/scratch", "nodes": "node[2-3]", "server": "10.9.0.5", "remote_path": "/s"},
            {"name": "home", "path": "/home", "nodes": "ctl,workers", "server": "10.9.0.5", "remote_path": "/h"},
            {"name": "site", "path": "/site", "nodes": "workers", "kind": "external"},
        ]
    }
    return data


def mount(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in data["storage"]["mounts"] if m["name"] == name)  # type: ignore[no-any-return]


class Deploys:
    """``run_deploys`` stand-in that checks, for every node whose mount units change, that the
    node is drained with no job running and is deployed by a batch (``run.drained``)."""

    def __init__(self, slurm: StubSlurm, spec_text: str) -> None:
        self.slurm = slurm
        self.has = dict.fromkeys(["node1", *WORKERS], spec_text)
        self.units_changed: list[str] = []
        self.batch_runs: list[list[str]] = []

    def __call__(
        self, spec_path: Any, limit: str | None = None, on_event: Any = None, run: Any = None, locked: bool = False
    ) -> ApplyResult:
        wanted = spec_path.source.read_text()
        names = (limit or "").split(",")
        if run is not None and run.drained:
            assert set(run.drained) == set(names), "a batch run names exactly its drained nodes"
            self.batch_runs.append(names)
        hosts = {}
        for name in names:
            before = node_units(parse_spec(self.has[name])).get(name, {})
            after = node_units(parse_spec(wanted)).get(name, {})
            if before != after:
                self.units_changed.append(name)
                if name in WORKERS:
                    assert self.slurm.node(name)["drain"], f"{name}'s mounts changed while in service"
                    assert not self.slurm.jobs_running(name), f"{name}'s mounts changed under a running job"
                    assert run is not None and name in run.drained, f"{name} changed outside a rollout batch"
            self.has[name] = wanted
            hosts[name] = HostResult(name, changed=["storage-mounts"] if before != after else [])
        return ApplyResult(hosts)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, StubSlurm, Deploys]:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(slurm_drain, "POLL_S", 0.2)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml_text.dump(spec_data()))
    record_applied(Cluster.of(load_spec(spec_file), spec_file))
    slurm = StubSlurm(tmp_path / "slurm", "node1", ["node1", *WORKERS])
    deploys = Deploys(slurm, spec_file.read_text())
    monkeypatch.setattr(remote, "run", slurm.remote_run)
    monkeypatch.setattr(remote, "wait_reachable", lambda *a, **k: True)
    monkeypatch.setattr(apply_mod, "run_deploys", deploys)
    monkeypatch.setattr(apply_mod, "validate_nodes", lambda spec_path, nodes: {})
    lock_nodes_locally(monkeypatch, tmp_path / "node-locks")
    return spec_file, slurm, deploys


def drains(slurm: StubSlurm) -> list[str]:
    return [line for line in slurm.log() if "State=DRAIN" in line]


def change(spec_file: Path, edit: Any) -> None:
    data = spec_data()
    edit(data)
    spec_file.write_text(yaml_text.dump(data))


def test_a_mount_changed_for_two_nodes_drains_those_two_only(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    slurm.add_job(41, "node3", polls=2)  # waited for: listed by two squeue reads
    slurm.add_job(42, "node4", seconds=60)  # node4's mounts do not change: its job is never waited on
    change(spec_file, lambda d: mount(d, "scratch").update(options=["hard", "noatime", "vers=4.2"]))
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok and not result.waiting, result.hosts
    assert drains(slurm) == [f"scontrol update NodeName=node[2-3] State=DRAIN Reason={DRAIN_TAG}"]
    assert deploys.units_changed == ["node2", "node3"] and deploys.batch_runs == [["node2", "node3"]]
    assert [slurm.node(n)["history"] for n in WORKERS] == [["DRAIN", "RESUME"], ["DRAIN", "RESUME"], [], []]
    assert slurm.jobs_running("node4") == [42] and last_applied(load_cluster(spec_file)) == load_spec(spec_file)


def test_a_mount_added_for_one_node_and_one_removed_from_another_drain_just_them(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster

    def edit(d: dict[str, Any]) -> None:
        mount(d, "scratch").update(nodes="node2")  # removed from node3
        d["storage"]["mounts"].append(
            {"name": "data", "path": "/data", "nodes": "node5", "server": "10.9.0.5", "remote_path": "/d"}
        )

    change(spec_file, edit)
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok, result.hosts
    assert drains(slurm) == [
        f"scontrol update NodeName=node[3,5] State=DRAIN Reason={DRAIN_TAG}",
    ]
    assert sorted(deploys.units_changed) == ["node3", "node5"]
    assert slurm.node("node2")["history"] == [] and slurm.node("node4")["history"] == []


def test_an_operators_drain_is_kept_when_their_node_mount_changes(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    slurm.drain_by_hand("node3", "bad dimm")
    change(spec_file, lambda d: d["storage"]["mounts"].remove(mount(d, "scratch")))  # node2 and node3 lose it
    result = apply_mod.apply(load_cluster(spec_file))
    assert "drained by an operator (bad dimm)" in result.waiting["node3"]
    assert drains(slurm) == [f"scontrol update NodeName=node2 State=DRAIN Reason={DRAIN_TAG}"]
    assert slurm.node("node3") == {"drain": True, "reason": "bad dimm", "history": []}
    result = apply_mod.apply(load_cluster(spec_file), include_drained=True)
    assert result.ok and not result.waiting, result.hosts
    assert "node3" in deploys.units_changed
    assert slurm.node("node3") == {"drain": True, "reason": "bad dimm", "history": []}  # never resumed
    assert len(drains(slurm)) == 1


def test_changes_that_change_no_compute_nodes_unit_are_live(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster

    def edit(d: dict[str, Any]) -> None:
        mount(d, "site").update(path="/site2")  # external: gpuforge writes nothing for it
        d["storage"]["mounts"].append(
            {"name": "ctl", "path": "/ctl", "nodes": "ctl", "server": "10.9.0.5", "remote_path": "/c"}
        )

    change(spec_file, edit)
    rollout = plan_rollout(parse_spec(yaml_text.dump(spec_data())), load_spec(spec_file))
    assert rollout.rolling == [] and not rollout.batches
    assert sorted(c.path for c in rollout.live) == ["storage.mounts.ctl", "storage.mounts.site.path"]
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok and not result.waiting, result.hosts
    assert drains(slurm) == [] and deploys.units_changed == ["node1"]  # the controller remounts at once


def test_the_plan_names_each_drained_node_with_its_own_fields() -> None:
    old = spec_data()
    new = copy.deepcopy(old)
    mount(new, "scratch").update(timeout_s=60)
    mount(new, "home").update(nodes="ctl,node[2-4]")  # node5 loses /home
    plan = plan_rollout(parse_spec(yaml_text.dump(old)), parse_spec(yaml_text.dump(new)))
    assert plan.reasons == {
        "node2": ["storage.mounts.scratch.timeout_s"],
        "node3": ["storage.mounts.scratch.timeout_s"],
        "node5": ["storage.mounts.home.nodes"],
    }
    assert plan.batches == [["node2", "node3"], ["node5"]]
