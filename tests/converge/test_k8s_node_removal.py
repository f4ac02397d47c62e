"""A Kubernetes node dropped from the spec leaves the cluster: drained, ``kubeadm reset`` on it, its etcd
member removed (a control plane), deleted; a removal that would lose etcd's quorum is refused (exit 2)
unless forced.

The commands run for real in ``sh``: on the first control plane against stand-in ``kubectl`` (stub_kube.py)
and ``crictl`` (its ``exec ... etcdctl`` answers from a member list in a file), on the removed node
against a stand-in ``kubeadm``. The removal plan of the example's third control plane is a golden file.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuforge.cli import app
from gpuforge.deploy.run import ApplyResult, HostResult
from gpuforge.orchestrate import apply as apply_mod
from gpuforge.orchestrate import remote
from gpuforge.orchestrate.applied_record import last_applied, record_applied
from gpuforge.orchestrate.k8s_remove import quorum_issue, removal_steps, removed, run_removals
from gpuforge.spec import load_spec
from gpuforge.spec.cluster import Cluster as Loaded
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.load import parse_spec
from tests import yaml_text
from tests.converge.simulated import lock_nodes_locally, write_simulated_spec
from tests.converge.stub_kube import StubKube
from tests.helpers import INVENTORIES

GOLDEN = Path(__file__).parent / "fixtures" / "k8s_day2" / "plan_remove_control_plane.json"
#: ``etcdctl member list``'s format (etcd-operate: id, status, name, peer URLs, client URLs, learner).
MEMBERS = "".join(
    f"{mid}, started, {name}, https://198.51.100.{ip}:2380, https://198.51.100.{ip}:2379, false\n"
    for mid, name, ip in (("8211f1d0f64f3269", "kcp1", 10), ("91bc3c398fb3c146", "kcp2", 11),
                          ("fd422379fda50e48", "kcp3", 12))
)  # fmt: skip


def data(planes: str = "kcp[1-3]", gpus: str = "kgpu[01-08]") -> dict[str, Any]:
    d = yaml.safe_load((INVENTORIES / "k8s-gpu-operator.yaml").read_text())
    groups = {g["name"]: g for g in d["node_groups"]}
    groups["cp"]["hosts"], groups["gpu"]["hosts"] = planes, gpus
    d["rollout"] = {"batch_size": 1, "drain_timeout": 60}
    return d


def spec_of(**kw: str) -> Any:
    return parse_spec(yaml_text.dump(data(**kw)), "k8s.yaml")


def test_dropped_nodes_are_found_workers_first() -> None:
    assert removed(spec_of(), spec_of(planes="kcp[1-2]", gpus="kgpu[01-07]")) == ["kgpu08", "kcp3"]
    assert removed(spec_of(), spec_of()) == [] and removed(None, spec_of()) == []


def test_losing_etcds_quorum_is_refused_keeping_a_majority_is_not() -> None:
    assert quorum_issue(spec_of(), spec_of(planes="kcp[1-2]")) is None  # 2 of 3 keep the quorum
    issue = quorum_issue(spec_of(), spec_of(planes="kcp1"))
    assert issue is not None and issue.path == "node_groups"
    assert "leaves 1 of 3 etcd members, fewer than its quorum of 2" in issue.message and "--force" in issue.message


def test_the_removal_of_a_control_plane_is_the_golden_plan() -> None:
    steps = removal_steps(spec_of(), "kcp3")
    got = [{"on": s.where, "summary": s.summary, "command": s.command} for s in steps]
    if os.environ.get("GPUFORGE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(GOLDEN.read_text())
    assert [s["summary"].split(" ")[0] for s in got] == ["drain", "kubeadm", "remove", "delete"]  # upstream's order


CRICTL = """#!/bin/sh
# crictl stand-in: one etcd container; 'exec <id> etcdctl ...' answers from $KSTATE/members
while [ "${1#--}" != "$1" ]; do shift 2; done
echo "crictl $*" >> "$KSTATE/log"
case "$1" in
  ps) echo 0123abcd ;;
  exec) shift 2; [ "$1" = etcdctl ] || exit 1; shift
        while [ "${1#--}" != "$1" ]; do shift; done
        case "$1 $2" in
          "member list") cat "$KSTATE/members" ;;
          "member remove") grep -v "^$3," "$KSTATE/members" > "$KSTATE/m.new"; mv "$KSTATE/m.new" "$KSTATE/members"
                           echo "Member $3 removed from cluster" ;;
        esac ;;
esac
"""


class Cluster:
    """The first control plane (stand-in kubectl and crictl) and the other nodes (stand-in kubeadm)."""

    def __init__(self, root: Path, names: list[str]) -> None:
        self.kube = StubKube(root / "kube", "kcp1", names)
        self.state = root / "kube" / "etcd"
        self.state.mkdir()
        (self.state / "members").write_text(MEMBERS)
        (self.kube.bin / "crictl").write_text(CRICTL)
        (self.kube.bin / "crictl").chmod(0o755)
        self.node_bin = root / "node-bin"
        self.node_bin.mkdir()
        (self.node_bin / "kubeadm").write_text('#!/bin/sh\necho "$NODE kubeadm $*" >> "$KSTATE/log"\n')
        (self.node_bin / "kubeadm").chmod(0o755)
        self.unreachable: set[str] = set()

    def run(self, cluster: Any, node: str, command: str, timeout: float = 120) -> Any:
        if node in self.unreachable:
            return subprocess.CompletedProcess(command, 255, "", "ssh: connect to host: No route to host")
        path = self.kube.bin if node == "kcp1" else self.node_bin
        env = {**os.environ, "PATH": f"{path}:{os.environ['PATH']}", "STUB_KUBE": str(self.kube.state),
               "KSTATE": str(self.state), "NODE": node}  # fmt: skip
        return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=timeout)

    def log(self) -> list[str]:
        return (self.state / "log").read_text().splitlines()


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    c = Cluster(tmp_path, [n for n in ("kcp1", "kcp2", "kcp3", "kgpu01")])
    monkeypatch.setattr(remote, "run", c.run)
    return c


def test_a_control_plane_leaves_drained_reset_member_removed_and_deleted(cluster: Cluster) -> None:
    assert run_removals(spec_of(), Loaded.of(spec_of(planes="kcp[1-2]"), "spec.yaml")) == {}
    kubectl = [c for c in Path(f"{cluster.kube.state}.log").read_text().splitlines() if " kcp3" in c]
    assert kubectl == [
        "kubectl get node kcp3",
        "kubectl drain kcp3 --delete-emptydir-data --force --ignore-daemonsets --timeout=60s",
        "kubectl delete node kcp3 --ignore-not-found",
    ]
    log = cluster.log()
    assert log[0] == "kcp3 kubeadm reset -f"
    execs = [line for line in log if line.startswith("crictl exec 0123abcd etcdctl --endpoints=https://127.0.0.1")]
    assert [e.endswith(" member list") for e in execs] == [True, False]
    assert execs[1].endswith(" member remove fd422379fda50e48")  # kcp3's id in etcdctl's member list
    assert "kcp3" not in (cluster.state / "members").read_text()
    assert "kcp3" not in cluster.kube.read()["nodes"]  # deleted
    assert "kcp2" in (cluster.state / "members").read_text()


def test_an_unreachable_node_still_leaves_the_cluster(cluster: Cluster) -> None:
    cluster.unreachable.add("kcp3")
    assert run_removals(spec_of(), Loaded.of(spec_of(planes="kcp[1-2]"), "spec.yaml")) == {}
    assert not any("kubeadm reset" in line for line in cluster.log())
    assert "kcp3" not in (cluster.state / "members").read_text()


def test_a_drain_that_a_disruption_budget_blocks_stops_the_removal(cluster: Cluster) -> None:
    cluster.kube.update(lambda d: d["pods"].append({"node": "kgpu01", "pdb_blocked": True}))
    got = run_removals(spec_of(gpus="kgpu[01-08]"), Loaded.of(spec_of(gpus="kgpu[02-08]"), "spec.yaml"))
    assert "disruption budget" in got["kgpu01"] and "drain kgpu01" in got["kgpu01"]
    assert "kgpu01" in cluster.kube.read()["nodes"]  # not deleted, not reset
    assert not (cluster.state / "log").exists()


def test_apply_removes_first_and_refuses_a_quorum_loss_without_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: Cluster
) -> None:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    path = write_simulated_spec(data(), tmp_path, "k8s.yaml")
    record_applied(Loaded.of(load_spec(path), path))
    deployed: list[str] = []

    def deploys(spec_path: Any, limit: str | None = None, *a: Any, **k: Any) -> ApplyResult:
        assert "kcp3" not in cluster.kube.read()["nodes"], "a deploy ran before kcp3 left"
        deployed.extend((limit or "").split(","))
        return ApplyResult({n: HostResult(n) for n in (limit or "").split(",") if n})

    monkeypatch.setattr(apply_mod, "run_deploys", deploys)
    monkeypatch.setattr(apply_mod, "validate_nodes", lambda _path, nodes: {})
    lock_nodes_locally(monkeypatch, tmp_path / "node-locks")
    path.write_text(yaml_text.dump({**yaml.safe_load(path.read_text()), "node_groups": data("kcp1")["node_groups"]}))
    out = CliRunner().invoke(app, ["apply", str(path), "--yes"])
    assert out.exit_code == 2 and "fewer than its quorum of 2" in out.output, out.output
    assert deployed == [] and "kcp3" in cluster.kube.read()["nodes"]  # nothing touched
    path.write_text(
        yaml_text.dump({**yaml.safe_load(path.read_text()), "node_groups": data("kcp[1-2]")["node_groups"]})
    )
    result = apply_mod.apply(load_cluster(path))
    assert result.ok and "kcp3" not in deployed and deployed
    assert last_applied(load_cluster(path)) == load_spec(path)


def test_plan_lists_the_removal_and_what_apply_would_refuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuforge.orchestrate.plan import plan
    from tests.converge.simulated import simulated

    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    simulated(monkeypatch, tmp_path)
    path = write_simulated_spec(data(), tmp_path, "k8s.yaml")
    record_applied(Loaded.of(load_spec(path), path))
    path.write_text(
        yaml_text.dump({**yaml.safe_load(path.read_text()), "node_groups": data("kcp[1-2]")["node_groups"]})
    )
    result = plan(load_cluster(path), limit="kcp1")
    assert [(r["node"], r["on"]) for r in result.as_dict()["removals"]] == [
        ("kcp3", "first control plane"), ("kcp3", "kcp3"), ("kcp3", "first control plane"),
        ("kcp3", "first control plane"),
    ]  # fmt: skip
    assert result.removal_problem is None and result.exit_code(detailed=True) == 2  # changes pending
    path.write_text(yaml_text.dump({**yaml.safe_load(path.read_text()), "node_groups": data("kcp1")["node_groups"]}))
    refused = plan(load_cluster(path), limit="kcp1")
    assert refused.removal_problem is not None and "quorum of 2" in refused.removal_problem
