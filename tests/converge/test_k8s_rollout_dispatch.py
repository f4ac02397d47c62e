"""A rolling change on a Kubernetes spec drains through the Kubernetes path: ``node_hold.drain``
and ``node_hold.resume`` send the cordon/drain and uncordon commands to the first control plane
over ``remote.run`` (no scontrol, no Slurm controller), batch by batch around the batch's deploy.

``remote.run`` is replaced by a recorder (nothing is reached); the deploys and the validator are
replaced by recorders too, so the sequence of one rolling apply is the data under test. (The
commands themselves run against a stand-in ``kubectl`` in tests/converge/test_k8s_drain.py.)
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuforge.deploy.run import ApplyResult, HostResult
from gpuforge.orchestrate import remote
from gpuforge.orchestrate.applied_record import RolloutRecord
from gpuforge.orchestrate.batches import Rollout, run_batches
from gpuforge.orchestrate.rollout import plan_rollout
from gpuforge.spec import resolve_nodes
from gpuforge.spec.cluster import Cluster
from tests.converge.simulated import lock_nodes_locally
from tests.helpers import variant

K = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


def drain(node: str) -> str:
    return (
        f"if [ \"$({K} get node {node} -o jsonpath='{{.spec.unschedulable}}')\" != true ]; then "
        f"{K} annotate node {node} --overwrite gpuforge.dev/cordoned-by=rolling-change && {K} cordon {node}; fi && "
        f"{K} drain {node} --ignore-daemonsets --delete-emptydir-data --timeout=600s"
    )


def resume(node: str) -> str:
    return (
        f"if [ \"$({K} get node {node} -o jsonpath='{{.metadata.annotations.gpuforge\\.dev/cordoned-by}}')\" = "
        f"rolling-change ]; then {K} uncordon {node} && {K} annotate node {node} gpuforge.dev/cordoned-by-; fi"
    )


def specs() -> tuple[Any, Any]:
    """The Kubernetes example applied, then its MIG layout changed (a rolling field of kinf01, kinf02)."""

    def base(d: dict[str, Any]) -> None:
        d["rollout"] = {"batch_size": 1, "drain_timeout": 600}

    def relayout(d: dict[str, Any]) -> None:
        base(d)
        d["mig"]["configs"]["all-1g"][0]["mig_devices"] = {"2g.20gb": 3}

    return variant("k8s-gpu-operator", base), variant("k8s-gpu-operator", relayout)


class Recorder:
    """What one rolling apply did, in order; ``blocked`` nodes' drains fail as a PodDisruptionBudget makes them."""

    PDB = "error: Cannot evict pod as it would violate the pod's disruption budget."

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.blocked: set[str] = set()

    def run(self, cluster: Any, node: str, command: str, timeout: float = 120) -> Any:
        self.events.append(("remote", node, command, timeout))
        if any(f"{K} drain {n} " in command for n in self.blocked):
            return subprocess.CompletedProcess(command, 1, "", self.PDB + "\n")
        return subprocess.CompletedProcess(command, 0, "", "")

    def deploys(self, spec_path: Any, limit: str | None = None, on_event: Any = None) -> ApplyResult:
        self.events.append(("deploy", limit))
        return ApplyResult({n: HostResult(n) for n in (limit or "").split(",") if n})

    def validate(self, spec_path: Any, nodes: list[str]) -> dict[str, str]:
        self.events.append(("validate", nodes))
        return {}


@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Recorder:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path))  # the rollout record
    r = Recorder()
    monkeypatch.setattr(remote, "run", r.run)
    locks = tmp_path / "node-locks"
    lock_nodes_locally(monkeypatch, locks)  # the real lock command, on a local file per node
    return r


def rolling(rec: Recorder) -> ApplyResult:
    old, new = specs()
    plan = plan_rollout(old, new)
    assert plan.batches == [["kinf01"], ["kinf02"]]
    others = [n.name for n in resolve_nodes(new) if n.name not in plan.rolling_nodes]
    result = rec.deploys("spec.yaml", ",".join(others))  # the rest at once (live)
    ro = Rollout(
        Cluster.of(new, "spec.yaml"), lambda _msg: None, False, RolloutRecord(),
        deploy=lambda names: rec.deploys("spec.yaml", ",".join(names)),
        validate=lambda names: rec.validate("spec.yaml", names),
    )  # fmt: skip
    run_batches(ro, plan.batches, {}, result)
    return result


def test_a_rolling_change_drains_and_resumes_each_batch_on_the_first_control_plane(rec: Recorder) -> None:
    assert rolling(rec).ok
    others = "kcp1,kcp2,kcp3,kmon1," + ",".join(f"kgpu0{i}" for i in range(1, 9))
    assert rec.events == [
        ("deploy", others),  # the rest at once (live)
        ("remote", "kcp1", drain("kinf01"), 660),  # drain_timeout + 60
        ("deploy", "kinf01"),
        ("validate", ["kinf01"]),
        ("remote", "kcp1", resume("kinf01"), 120),
        ("remote", "kcp1", drain("kinf02"), 660),
        ("deploy", "kinf02"),
        ("validate", ["kinf02"]),
        ("remote", "kcp1", resume("kinf02"), 120),
    ]


def test_a_drain_a_disruption_budget_blocks_stops_the_rollout_before_the_deploy(rec: Recorder) -> None:
    rec.blocked.add("kinf01")
    result = rolling(rec)
    assert result.hosts["kinf01"].error == f"drain: {Recorder.PDB} (on kcp1) (node left drained; rollout stopped)"
    assert rec.events[1:] == [("remote", "kcp1", drain("kinf01"), 660)]  # no deploy, no resume, no kinf02
