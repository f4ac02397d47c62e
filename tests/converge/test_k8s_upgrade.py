"""Kubernetes upgrades as kubeadm's upgrade says: one minor at a time, ``kubeadm upgrade apply`` on the
first control plane, ``kubeadm upgrade node`` on the other control planes one by one, then the workers
batch by batch (drained, packages held at the pin, kubelet restarted, uncordoned).

The node commands run for real in ``sh`` against stand-in ``apt-get``/``apt-mark``/``kubeadm``/``systemctl``
that keep the installed versions and holds in files; the rollout runs through ``apply`` with the stand-in
``kubectl`` of ``stub_kube.py``; the plan of a 1.35 -> 1.36 upgrade of the example is a golden file.
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
from gpuforge.cli_apply import apply_exit_code
from gpuforge.deploy.converge import LayerFacts, StepKind
from gpuforge.deploy.layers.kubernetes import kubernetes_layer
from gpuforge.deploy.run import ApplyResult, HostResult
from gpuforge.orchestrate import apply as apply_mod
from gpuforge.orchestrate import k8s_drain, remote
from gpuforge.orchestrate.applied_record import last_applied, record_applied
from gpuforge.orchestrate.k8s_upgrade import batches, version_issues
from gpuforge.orchestrate.rollout import plan_rollout
from gpuforge.spec import SpecError, load_spec, resolve_nodes
from gpuforge.spec.cluster import Cluster, load_cluster
from gpuforge.spec.load import parse_spec
from tests import yaml_text
from tests.converge.converged import converge
from tests.converge.simulated import lock_nodes_locally, write_simulated_spec
from tests.converge.stub_kube import StubKube
from tests.helpers import INVENTORIES

OLD, NEW = "1.35.9", "1.36.4"
GOLDEN = Path(__file__).parent / "fixtures" / "k8s_day2" / "plan_upgrade.json"
PLANES = ["kcp1", "kcp2", "kcp3"]


def data(version: str = NEW, batch_size: int = 4) -> dict[str, Any]:
    d = yaml.safe_load((INVENTORIES / "k8s-gpu-operator.yaml").read_text())
    d["versions"]["kubernetes"] = version
    d["rollout"] = {"batch_size": batch_size, "drain_timeout": 60}
    return d


def spec_of(version: str = NEW, batch_size: int = 4) -> Any:
    return parse_spec(yaml_text.dump(data(version, batch_size)), "k8s.yaml")


def node(spec: Any, name: str) -> Any:
    return next(n for n in resolve_nodes(spec) if n.name == name)


# --------------------------------------------------------------------------- one minor at a time


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("1.34.3", "1.36.4", "skips a minor version"),
        ("1.36.4", "1.35.9", "is a downgrade"),
        ("1.36.4", "1.36.2", "is a downgrade"),
    ],
)
def test_a_skipped_minor_or_a_downgrade_is_refused_naming_the_field(old: str, new: str, why: str) -> None:
    (issue,) = version_issues(spec_of(old), spec_of(new))
    assert issue.path == "versions.kubernetes" and why in issue.message
    with pytest.raises(SpecError) as e:
        plan_rollout(spec_of(old), spec_of(new))
    assert "versions.kubernetes" in e.value.format()


def test_one_minor_or_a_patch_is_a_rolling_change_of_every_kubernetes_node() -> None:
    assert version_issues(spec_of(OLD), spec_of(NEW)) == []
    assert version_issues(spec_of("1.36.2"), spec_of(NEW)) == []
    plan = plan_rollout(spec_of(OLD), spec_of(NEW))
    assert plan.rolling_nodes == [n.name for n in resolve_nodes(spec_of())]  # control planes and workers
    assert plan.batches[:3] == [["kcp1"], ["kcp2"], ["kcp3"]]  # control planes alone, the first first
    assert plan.batches[3:] == [["kmon1", "kgpu01", "kgpu02", "kgpu03"], ["kgpu04", "kgpu05", "kgpu06", "kgpu07"],
                                ["kgpu08", "kinf01", "kinf02"]]  # fmt: skip


def test_control_planes_roll_alone_in_any_rolling_change() -> None:
    spec = spec_of(batch_size=8)
    assert batches(spec, ["kgpu01", "kcp2", "kcp1", "kgpu02"], 8) == [["kcp1"], ["kcp2"], ["kgpu01", "kgpu02"]]


def test_apply_refuses_a_skip_before_touching_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    path = write_simulated_spec(data("1.34.3"), tmp_path, "k8s.yaml")
    record_applied(Cluster.of(load_spec(path), path))
    path.write_text(yaml_text.dump({**yaml.safe_load(path.read_text()), "versions": data(NEW)["versions"]}))
    monkeypatch.setattr(remote, "run", lambda *a, **k: pytest.fail("a node was reached"))
    monkeypatch.setattr(apply_mod, "run_deploys", lambda *a, **k: pytest.fail("a deploy ran"))
    out = CliRunner().invoke(app, ["apply", str(path), "--yes"])
    assert out.exit_code == 2, out.output
    assert "versions.kubernetes: 1.34.3 -> 1.36.4 skips a minor version" in out.output


# --------------------------------------------------------------------------- each node's commands


def member(version: str, extra: dict[str, str] | None = None) -> LayerFacts:
    """A node in the cluster with kubelet, kubeadm and kubectl at ``version``."""
    return LayerFacts(
        packages={p: f"{version}-1.1" for p in ("kubelet", "kubeadm", "kubectl")},
        contents={"/var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\n", **(extra or {})},
    )


def upgrade(name: str, facts: LayerFacts) -> list[Any]:
    spec = spec_of()
    steps = kubernetes_layer(spec, node(spec, name)).after(facts, set())  # type: ignore[misc]
    return [s for s in steps if s.kind in (StepKind.UPGRADE, StepKind.VERIFY, StepKind.RESTART, StepKind.WARNING)]


def test_the_first_control_plane_upgrades_with_kubeadm_upgrade_apply() -> None:
    steps = upgrade("kcp1", member(OLD))
    assert [(s.kind.value, s.summary) for s in steps] == [
        ("upgrade", f"kubeadm {OLD}-1.1 -> {NEW} (held)"),
        ("verify", f"kubeadm upgrade plan v{NEW} (the cluster can be upgraded)"),
        ("upgrade", f"kubeadm upgrade apply v{NEW} (the control plane, first)"),
        ("upgrade", f"kubelet {OLD}-1.1 -> {NEW}, kubectl {OLD}-1.1 -> {NEW} (held)"),
        ("restart", "restart kubelet on the new version"),
    ]
    assert steps[2].command == f"kubeadm upgrade apply v{NEW} --yes"
    assert steps[4].command == "systemctl daemon-reload && systemctl restart kubelet"


@pytest.mark.parametrize("name", ["kcp2", "kgpu01"])
def test_other_nodes_upgrade_with_kubeadm_upgrade_node(name: str) -> None:
    commands = [s.command for s in upgrade(name, member(OLD))]
    assert "kubeadm upgrade node" in commands and not any("upgrade apply" in (c or "") for c in commands)


def test_an_interrupted_upgrade_runs_kubeadms_upgrade_again_and_a_newer_node_is_left_alone() -> None:
    half = member(OLD)
    half.packages["kubeadm"] = f"{NEW}-1.1"  # kubeadm moved, the kubelet not yet
    assert next(s.command for s in upgrade("kcp2", half)) == "kubeadm upgrade node"  # idempotent: again
    assert upgrade("kcp2", member(NEW)) == []
    (warning,) = upgrade("kcp2", member("1.37.0"))
    assert warning.kind is StepKind.WARNING and "kubeadm does not downgrade" in warning.summary


STUBS = {
    "apt-get": """echo "apt-get $*" >> "$STATE/log"
for a in "$@"; do case "$a" in *=*) p=${a%%=*}; v=${a#*=}; v=${v%-\\*}; echo "$v" > "$STATE/$p.version";; esac; done""",
    "apt-mark": """echo "apt-mark $*" >> "$STATE/log"; verb=$1; shift
for p in "$@"; do if [ "$verb" = hold ]; then touch "$STATE/$p.held"; else rm -f "$STATE/$p.held"; fi; done""",
    "apt-cache": "exit 0",
    "dpkg-query": "exit 0",
    "kubeadm": """echo "kubeadm $*" >> "$STATE/log"
[ "$(cat "$STATE/kubeadm.version")" = "${UPGRADE_TO#v}" ] || { echo "kubeadm is still old" >&2; exit 1; }""",
    "systemctl": 'echo "systemctl $*" >> "$STATE/log"',
}


@pytest.mark.parametrize(("name", "verb"), [("kcp1", f"upgrade apply v{NEW} --yes"), ("kgpu01", "upgrade node")])
def test_the_upgrade_commands_run_in_order_and_leave_the_packages_held(tmp_path: Path, name: str, verb: str) -> None:
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    state.mkdir()
    bin_dir.mkdir()
    for tool, body in STUBS.items():
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    for p in ("kubelet", "kubeadm", "kubectl"):
        (state / f"{p}.version").write_text(f"{OLD}\n")
        (state / f"{p}.held").touch()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STATE": str(state), "UPGRADE_TO": f"v{NEW}"}
    proc = tmp_path / "proc"  # the wait for a package run reads /proc: the node's, not this machine's (a lab
    proc.mkdir()  # node's apt-get is a process here too)
    for step in upgrade(name, member(OLD)):
        command = step.command.replace("/proc/", f"{proc}/")
        cp = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, (step.summary, cp.stderr)
    calls = [line for line in (state / "log").read_text().splitlines() if not line.startswith("apt-get -q -o")]
    installs = [c.split(" install --no-install-recommends ")[-1].removeprefix("--allow-downgrades ")
                for c in calls if c.startswith("apt-get")]  # fmt: skip
    assert installs == [f"kubeadm={NEW}-*", f"kubelet={NEW}-* kubectl={NEW}-*"]
    order = [c for c in calls if not c.startswith("apt-get")]
    first = ["kubeadm upgrade plan v1.36.4"] if name == "kcp1" else []
    assert order == [
        "apt-mark unhold kubeadm", "apt-mark hold kubeadm", *first, f"kubeadm {verb}",
        "apt-mark unhold kubelet kubectl", "apt-mark hold kubelet kubectl",
        "systemctl daemon-reload", "systemctl restart kubelet",
    ]  # fmt: skip
    for p in ("kubelet", "kubeadm", "kubectl"):
        assert (state / f"{p}.version").read_text().strip() == NEW and (state / f"{p}.held").exists()


# --------------------------------------------------------------------------- the rollout, through apply


class Deploys:
    """``run_deploys`` stand-in: a node moves to the spec's version when deployed; at that moment it
    must be cordoned and, for a worker, every control plane must already run the new version."""

    def __init__(self, kube: StubKube, names: list[str]) -> None:
        self.kube, self.version, self.order = kube, dict.fromkeys(names, OLD), []  # type: ignore[var-annotated]

    def __call__(self, spec_path: Any, limit: str | None = None, *a: Any, **k: Any) -> ApplyResult:
        want = yaml.safe_load(spec_path.source.read_text())["versions"]["kubernetes"]
        hosts = {}
        for name in (limit or "").split(","):
            if self.version[name] != want:
                assert self.kube.node(name)["unschedulable"], f"{name} upgraded while schedulable"
                if not name.startswith("kcp"):
                    assert all(self.version[p] == want for p in PLANES), f"{name}'s kubelet before the API server"
                self.order.append(name)
                self.version[name] = want
            hosts[name] = HostResult(name, changed=["kubernetes"])
        return ApplyResult(hosts)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, StubKube, Deploys]:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    path = tmp_path / "spec.yaml"
    path.write_text(yaml_text.dump(data(OLD)))
    record_applied(Cluster.of(load_spec(path), path))
    names = [n.name for n in resolve_nodes(load_spec(path))]
    kube = StubKube(tmp_path / "kube", "kcp1", names)
    deploys = Deploys(kube, names)
    path.write_text(yaml_text.dump(data(NEW)))
    monkeypatch.setattr(remote, "run", kube.remote_run)
    monkeypatch.setattr(apply_mod, "run_deploys", deploys)
    monkeypatch.setattr(apply_mod, "validate_nodes", lambda _path, nodes: {})
    lock_nodes_locally(monkeypatch, tmp_path / "node-locks")
    return path, kube, deploys


def test_the_control_planes_upgrade_one_by_one_then_the_workers_batch_by_batch(cluster: Any) -> None:
    path, kube, deploys = cluster
    kube.update(lambda d: d["nodes"]["kgpu05"].update(unschedulable=True))  # an operator's cordon
    result = apply_mod.apply(load_cluster(path), include_drained=True)
    assert result.ok and not result.waiting, {n: h.error for n, h in result.hosts.items() if h.error}
    assert deploys.order[:3] == PLANES
    assert set(deploys.order[3:]) == {n for n in deploys.version if not n.startswith("kcp")}
    for name in deploys.version:
        if name != "kgpu05":
            assert kube.node(name)["history"] == ["cordon", "drain", "uncordon"], name
    assert kube.node("kgpu05")["unschedulable"] and kube.node("kgpu05")["history"] == ["drain"]  # still theirs
    assert last_applied(load_cluster(path)) == load_spec(path)


def test_a_worker_limited_alone_waits_for_the_control_planes(cluster: Any) -> None:
    path, kube, deploys = cluster
    result = apply_mod.apply(load_cluster(path), limit="kgpu01")
    assert apply_exit_code(result) == 3 and "the control planes upgrade first" in result.waiting["kgpu01"]
    assert deploys.order == [] and kube.node("kgpu01")["history"] == []
    result = apply_mod.apply(load_cluster(path), limit="kcp[1-3]")
    assert result.ok and deploys.order == PLANES
    result = apply_mod.apply(load_cluster(path), limit="kgpu01")
    assert result.ok and not result.waiting and deploys.order == [*PLANES, "kgpu01"]


# --------------------------------------------------------------------------- the plan of a 1.35 -> 1.36 upgrade


def test_the_plan_of_an_upgrade_is_the_golden_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every node of the example converged at 1.35.9, the spec moved to 1.36.4: the rollout's batches
    with the drain and uncordon commands, and each node's upgrade commands in their order."""
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    old_path = write_simulated_spec(data(OLD), tmp_path, "old.yaml")
    new_path = write_simulated_spec(data(NEW), tmp_path, "new.yaml")
    converged = converge(load_spec(old_path), old_path, monkeypatch, tmp_path)
    changes = converged.changes(new_path)
    per_node: dict[str, list[list[str]]] = {}
    for step in changes:  # in the order the dry run planned them
        if step.layer == "kubernetes" and step.kind in ("upgrade", "verify", "restart"):
            per_node.setdefault(step.host, []).append([step.kind, step.summary, step.command or ""])
    plan = plan_rollout(load_spec(old_path), load_spec(new_path))
    got: dict[str, Any] = {
        "batches": [
            {"nodes": b, "drain": k8s_drain.drain_command(b, 60), "resume": k8s_drain.resume_command(b)}
            for b in plan.batches[:4]
        ],
        "steps": {n: per_node.get(n, []) for n in ("kcp1", "kcp2", "kgpu01")},
    }
    if os.environ.get("GPUFORGE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(GOLDEN.read_text())
    assert [s[0] for s in got["steps"]["kcp1"]] == ["upgrade", "verify", "upgrade", "upgrade", "restart"]
