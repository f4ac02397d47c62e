"""Day-2 safety, end to end through ``apply``: the drain, wait and resume commands run for real in
``sh`` against a stand-in Slurm controller whose jobs end over time (``tests/converge/stub_slurm.py``).

The deploys are a recorder that, at the moment a node is changed, reads the stand-in's state: a
node changed while a job ran on it, or while it was not drained, fails the test there. The
validator is a recorder too (its own tests are elsewhere).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.cli_apply import apply_exit_code
from gpuforge.deploy.run import ApplyResult, HostResult
from gpuforge.orchestrate import apply as apply_mod
from gpuforge.orchestrate import node_lock, remote, slurm_drain
from gpuforge.orchestrate.applied_record import last_applied, load_rollout_record, record_applied
from gpuforge.orchestrate.slurm_drain import DRAIN_TAG
from gpuforge.spec import SpecError, load_spec
from gpuforge.spec.cluster import Cluster, load_cluster
from tests import yaml_text
from tests.converge.simulated import lock_nodes_locally
from tests.converge.stub_slurm import StubSlurm
from tests.helpers import INVENTORIES

WORKERS = ["node2", "node3", "node4", "node5"]


def spec_data(real_memory: int = 1000, drain_timeout: int = 20) -> dict[str, Any]:
    data = yaml.safe_load((INVENTORIES / "lab-slurm-minimal.yaml").read_text())
    data["node_groups"][1]["hosts"] = "node[2-5]"
    data["node_groups"][1]["hardware"] = {**data["node_groups"][1]["hardware"], "real_memory_mb": real_memory}
    data["rollout"] = {"batch_size": 2, "drain_timeout": drain_timeout}
    return data


class Deploys:
    """``run_deploys`` stand-in: a node changes when the spec differs from what it last got (else
    a no-op); at that moment the node must be drained with no job running on it (while
    ``rolling``). Nodes in ``reboot`` report that they need one until a reboot was sent to them."""

    def __init__(self, slurm: StubSlurm, spec_text: str) -> None:
        self.slurm = slurm
        self.has: dict[str, str] = dict.fromkeys(["node1", *WORKERS], spec_text)
        self.changed: list[str] = []
        self.reboot: set[str] = set()
        self.interrupt_at: str | None = None
        self.on_change: dict[str, Any] = {}
        self.rolling = True
        self.lock_file: Any = None

    def __call__(
        self, spec_path: Any, limit: str | None = None, on_event: Any = None, run: Any = None, locked: bool = False
    ) -> ApplyResult:
        wanted = spec_path.source.read_text()
        hosts = {}
        for name in (limit or "").split(","):
            if name == self.interrupt_at:
                raise KeyboardInterrupt  # Ctrl-C in the middle of a batch
            if any(n == name and "systemctl reboot" in c for n, c in self.slurm.node_commands):
                self.reboot.discard(name)
            needs = ["driver"] if name in self.reboot else []
            if self.has.get(name) == wanted:
                hosts[name] = HostResult(name, unchanged=1, reboot_required=needs)
                continue
            if name in WORKERS and self.rolling:
                assert self.slurm.node(name)["drain"], f"{name} changed while in service"
                assert not self.slurm.jobs_running(name), f"{name} changed under a running job"
                assert self.locked(name), f"{name} changed without its node lock held"
            self.changed.append(name)
            self.has[name] = wanted
            self.on_change.pop(name, lambda: None)()
            hosts[name] = HostResult(name, changed=["slurm"], reboot_required=needs)
        return ApplyResult(hosts)

    def locked(self, name: str) -> bool:
        """Whether some process holds ``name``'s apply lock (``flock -n`` cannot take it)."""
        path = self.lock_file(name)
        return path.exists() and subprocess.run(["flock", "-n", str(path), "true"]).returncode == 1

    def validate(self, spec_path: Any, nodes: list[str]) -> dict[str, str]:
        for name in nodes:
            assert self.locked(name), f"{name} validated without its node lock held"
        return {}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, StubSlurm, Deploys]:
    """A 5-node Slurm spec applied (recorded), then edited: a rolling change of every worker."""
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(slurm_drain, "POLL_S", 0.2)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml_text.dump(spec_data()))
    record_applied(Cluster.of(load_spec(spec_file), spec_file))
    slurm = StubSlurm(tmp_path / "slurm", "node1", ["node1", *WORKERS])
    deploys = Deploys(slurm, spec_file.read_text())
    spec_file.write_text(yaml_text.dump(spec_data(real_memory=900)))
    monkeypatch.setattr(remote, "run", slurm.remote_run)
    monkeypatch.setattr(remote, "wait_reachable", lambda *a, **k: True)
    monkeypatch.setattr(apply_mod, "run_deploys", deploys)
    monkeypatch.setattr(apply_mod, "validate_nodes", deploys.validate)
    locks = tmp_path / "node-locks"
    lock_nodes_locally(monkeypatch, locks)  # the real lock command, on a local file per node
    deploys.lock_file = lambda name: locks / name / "apply.lock"
    return spec_file, slurm, deploys


def errors(result: ApplyResult) -> dict[str, Any]:
    return {"errors": {n: h.error for n, h in result.hosts.items() if h.error}, "waiting": result.waiting}


def drains(slurm: StubSlurm) -> list[str]:
    return [line for line in slurm.log() if "State=DRAIN" in line]


def test_jobs_that_finish_during_the_wait_finish_before_their_node_changes(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    slurm.add_job(41, "node2", polls=2)  # listed by the first two squeue reads, then done
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok and not result.waiting, errors(result)
    assert deploys.changed == ["node1", "node2", "node3", "node4", "node5"]  # the controller live, then 2 batches
    assert drains(slurm) == [
        f"scontrol update NodeName=node[2-3] State=DRAIN Reason={DRAIN_TAG}",
        f"scontrol update NodeName=node[4-5] State=DRAIN Reason={DRAIN_TAG}",
    ]
    # It asked again while 41 ran, and changed node2 only after (the recorder checked node2 then).
    assert sum("squeue -h -w node[2-3]" in line for line in slurm.log()) == 3
    for name in WORKERS:
        assert slurm.node(name)["drain"] is False and slurm.node(name)["history"] == ["DRAIN", "RESUME"]
    assert (
        last_applied(load_cluster(spec_file)) == load_spec(spec_file)
        and not load_cluster(spec_file).rollout_record.exists()
    )


def test_jobs_outliving_the_drain_timeout_stop_the_rollout_with_the_batch_drained(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    spec_file.write_text(yaml_text.dump(spec_data(real_memory=900, drain_timeout=1)))
    slurm.add_job(7, "node3", seconds=60)
    result = apply_mod.apply(load_cluster(spec_file))
    assert apply_exit_code(result) == 1
    for name in ("node2", "node3"):
        error = result.hosts[name].error or ""
        assert error.startswith("drain: jobs still running on node[2-3] after 1 s: 7 node3"), error
        assert "node left drained; rollout stopped" in error
        assert slurm.node(name) == {"drain": True, "reason": DRAIN_TAG, "history": ["DRAIN"]}
    assert "node2" not in deploys.changed and "node3" not in deploys.changed
    assert slurm.node("node4")["history"] == [] and "node4" not in result.hosts  # the next batch never started
    assert load_rollout_record(load_cluster(spec_file))[0].drained == ["node2", "node3"]
    assert last_applied(load_cluster(spec_file)) != load_spec(spec_file)


def test_a_failing_squeue_never_reads_as_no_jobs(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    slurm.fail("squeue")
    result = apply_mod.apply(load_cluster(spec_file))
    assert not result.ok
    assert "squeue failed: cannot tell whether jobs still run on node[2-3]" in (result.hosts["node2"].error or "")
    assert deploys.changed == ["node1"]


def test_an_operators_drain_is_kept_and_never_resumed(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    slurm.drain_by_hand("node3", "bad gpu")
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok and apply_exit_code(result) == 3
    assert "drained by an operator (bad gpu)" in result.waiting["node3"]
    assert "node3" not in deploys.changed  # not changed at all without --include-drained
    assert slurm.node("node3") == {"drain": True, "reason": "bad gpu", "history": []}
    assert drains(slurm) == [  # batches of 2 formed from the nodes that may roll
        f"scontrol update NodeName=node[2,4] State=DRAIN Reason={DRAIN_TAG}",
        f"scontrol update NodeName=node5 State=DRAIN Reason={DRAIN_TAG}",
    ]
    # The others converged and are not drained again; the record waits for node3.
    assert load_rollout_record(load_cluster(spec_file))[0].converged == ["node1", "node2", "node4", "node5"]
    slurm_log = len(slurm.log())
    deploys.changed.clear()
    result = apply_mod.apply(load_cluster(spec_file), include_drained=True)
    assert result.ok and not result.waiting, errors(result)
    assert deploys.changed == ["node3"]  # the others had it already
    assert not any("State=DRAIN" in line for line in slurm.log()[slurm_log:])  # node3 waited on, not re-drained
    assert slurm.node("node3") == {"drain": True, "reason": "bad gpu", "history": []}  # still the operator's
    assert last_applied(load_cluster(spec_file)) == load_spec(spec_file)


def test_a_node_re_drained_by_an_operator_mid_batch_keeps_their_reason(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    deploys.on_change["node2"] = lambda: slurm.drain_by_hand("node2", "disk swap ticket 42")
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok
    assert slurm.node("node2")["reason"] == "disk swap ticket 42" and slurm.node("node2")["drain"]
    assert slurm.node("node3")["drain"] is False


def test_an_interrupted_rollout_is_resumed_by_the_next_run(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    deploys.interrupt_at = "node4"
    with pytest.raises(KeyboardInterrupt):
        apply_mod.apply(load_cluster(spec_file))
    record = load_rollout_record(load_cluster(spec_file))[0]
    assert record.drained == ["node4", "node5"] and record.converged == ["node2", "node3"]
    assert slurm.node("node4")["drain"] and slurm.node("node5")["drain"]
    deploys.interrupt_at = None
    deploys.changed.clear()
    before = len(drains(slurm))
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok and not result.waiting, errors(result)
    assert deploys.changed == ["node4", "node5"]  # node2 and node3 are not drained again
    assert drains(slurm)[before:] == [f"scontrol update NodeName=node[4-5] State=DRAIN Reason={DRAIN_TAG}"]
    assert all(not slurm.node(n)["drain"] for n in WORKERS)
    assert (
        last_applied(load_cluster(spec_file)) == load_spec(spec_file)
        and not load_cluster(spec_file).rollout_record.exists()
    )


def test_limit_narrows_the_roll_and_never_skips_it(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    result = apply_mod.apply(load_cluster(spec_file), limit="node2")
    assert result.ok and list(result.hosts) == ["node2"]
    assert drains(slurm) == [f"scontrol update NodeName=node2 State=DRAIN Reason={DRAIN_TAG}"]
    assert slurm.node("node2")["history"] == ["DRAIN", "RESUME"]
    assert last_applied(load_cluster(spec_file)) != load_spec(spec_file)  # not every node has it yet
    deploys.changed.clear()
    assert apply_mod.apply(load_cluster(spec_file)).ok
    assert deploys.changed == ["node1", "node3", "node4", "node5"]
    assert drains(slurm)[1:] == [
        f"scontrol update NodeName=node[3-4] State=DRAIN Reason={DRAIN_TAG}",
        f"scontrol update NodeName=node5 State=DRAIN Reason={DRAIN_TAG}",
    ]  # node2 converged already: not drained again
    assert last_applied(load_cluster(spec_file)) == load_spec(spec_file)


def test_a_limit_that_matches_no_node_is_refused_before_anything_runs(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    with pytest.raises(SpecError, match=r"--limit: 'compute2' matches no node of the spec; node groups: ctl, workers"):
        apply_mod.apply(load_cluster(spec_file), limit="compute2")
    assert slurm.log() == [] and deploys.changed == []


def test_a_reboot_the_change_needs_happens_drained_and_only_when_allowed(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    deploys.reboot = {"node2"}
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok and apply_exit_code(result) == 3
    assert "reboot required (driver); left drained" in result.waiting["node2"]
    assert slurm.node("node2")["drain"] and slurm.node("node4")["history"] == []  # stopped at the first batch
    assert slurm.node_commands == []
    result = apply_mod.apply(load_cluster(spec_file), allow_reboot=True)
    assert result.ok and not result.waiting, errors(result)
    assert [n for n, c in slurm.node_commands if "systemctl reboot" in c] == ["node2"]
    assert slurm.node("node2")["history"] == ["DRAIN", "DRAIN", "RESUME"]  # taken back by the rollout's record
    assert all(not slurm.node(n)["drain"] for n in WORKERS)


def test_a_first_bring_up_reboots_drained_batches_or_says_who_waits(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_file, slurm, deploys = cluster
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "fresh-state"))  # no record: a first bring-up
    deploys.rolling = False
    deploys.reboot = {"node3", "node4"}
    result = apply_mod.apply(load_cluster(spec_file))
    assert apply_exit_code(result) == 3 and set(result.waiting) == {"node3", "node4"}
    assert "apply --allow-reboot" in result.waiting["node3"] and slurm.log() == []
    assert last_applied(load_cluster(spec_file)) is None  # not converged yet
    result = apply_mod.apply(load_cluster(spec_file), allow_reboot=True)
    assert result.ok and not result.waiting, errors(result)
    # One batch of the rollout's size (2), drained before the reboot; the others are not touched.
    assert drains(slurm) == [f"scontrol update NodeName=node[3-4] State=DRAIN Reason={DRAIN_TAG}"]
    assert [n for n, c in slurm.node_commands if "systemctl reboot" in c] == ["node3", "node4"]
    assert slurm.node("node3")["history"] == ["DRAIN", "RESUME"]
    assert last_applied(load_cluster(spec_file)) == load_spec(spec_file)


def test_a_batch_node_another_run_holds_is_not_drained_and_stops_the_rollout(cluster: Any) -> None:
    spec_file, slurm, deploys = cluster
    other = node_lock.take(Cluster.of(load_spec(spec_file), "colleague.yaml"), ["node3"])  # another apply holds node3
    try:
        assert list(other.held) == ["node3"]
        result = apply_mod.apply(load_cluster(spec_file))
    finally:
        other.release()
    assert "another gpuforge apply holds this node" in (result.hosts["node3"].error or "")
    assert "(colleague.yaml)" in (result.hosts["node3"].error or "")
    assert drains(slurm) == [] and "node2" not in deploys.changed  # nothing of the batch was drained or changed
    assert not slurm.node("node2")["drain"]


def test_an_operator_re_draining_a_recorded_node_between_runs_keeps_it_drained(cluster: Any) -> None:
    """The record lists node4 (an interrupted run drained it); an operator then drains it again with
    a reason of their own: the next run leaves it to them (not re-tagged, not resumed)."""
    spec_file, slurm, deploys = cluster
    deploys.interrupt_at = "node4"
    with pytest.raises(KeyboardInterrupt):
        apply_mod.apply(load_cluster(spec_file))
    assert load_rollout_record(load_cluster(spec_file))[0].drained == ["node4", "node5"]
    slurm.drain_by_hand("node4", "dimm replacement ticket 7")
    deploys.interrupt_at = None
    deploys.changed.clear()
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok and apply_exit_code(result) == 3
    assert "drained by an operator (dimm replacement ticket 7)" in result.waiting["node4"]
    assert slurm.node("node4") == {"drain": True, "reason": "dimm replacement ticket 7", "history": ["DRAIN"]}
    assert deploys.changed == ["node5"]
    assert slurm.node("node5")["drain"] is False  # gpuforge's own drain is given back
    assert "node4" not in load_rollout_record(load_cluster(spec_file))[0].drained  # the operator's decision stands


def test_the_rollout_record_lists_a_batch_before_its_drain_is_sent(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while the drain runs: the record already names the batch, so the next run resumes it."""
    spec_file, slurm, _ = cluster
    seen: list[list[str]] = []

    def drain_then_die(loaded: Any, node: str, command: str, timeout: float = 120) -> Any:
        cp = slurm.remote_run(loaded, node, command, timeout)
        if "State=DRAIN" in command:
            seen.append(load_rollout_record(load_cluster(spec_file))[0].drained)
            raise KeyboardInterrupt  # the drain went out; the run dies before it hears back
        return cp

    monkeypatch.setattr(remote, "run", drain_then_die)
    with pytest.raises(KeyboardInterrupt):
        apply_mod.apply(load_cluster(spec_file))
    assert seen == [["node2", "node3"]]
    assert slurm.node("node2")["drain"] and slurm.node("node3")["drain"]
    monkeypatch.setattr(remote, "run", slurm.remote_run)
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok and not result.waiting, errors(result)
    assert all(not slurm.node(n)["drain"] for n in WORKERS)
