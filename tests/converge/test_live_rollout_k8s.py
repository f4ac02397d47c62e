"""Day-2 safety on Kubernetes, end to end through ``apply``: the cordon, drain and uncordon
commands run for real in ``sh`` against a stand-in ``kubectl`` (``tests/converge/stub_kube.py``)
whose nodes hold pods, some protected by a PodDisruptionBudget.

The deploys are a recorder that, at the moment a node is changed, reads the stand-in: a node
changed while schedulable or still running pods fails the test there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.cli_apply import apply_exit_code
from gpuforge.deploy.run import ApplyResult, HostResult
from gpuforge.orchestrate import apply as apply_mod
from gpuforge.orchestrate import remote
from gpuforge.orchestrate.applied_record import last_applied, record_applied
from gpuforge.spec import load_spec, resolve_nodes
from gpuforge.spec.cluster import Cluster, load_cluster
from tests import yaml_text
from tests.converge.simulated import lock_nodes_locally
from tests.converge.stub_kube import StubKube
from tests.helpers import INVENTORIES

MARK = "gpuforge.dev/cordoned-by"


def spec_data(inference_layout: dict[str, int] | None = None) -> dict[str, Any]:
    data = yaml.safe_load((INVENTORIES / "k8s-gpu-operator.yaml").read_text())
    data["rollout"] = {"batch_size": 1, "drain_timeout": 60}
    if inference_layout is not None:
        data["mig"]["configs"]["all-1g"][0]["mig_devices"] = inference_layout
    return data


class Deploys:
    """``run_deploys`` stand-in: a node changes when the spec differs from what it last got; at that
    moment a node of ``guarded`` must be cordoned with no pod left on it."""

    def __init__(self, kube: StubKube, spec_text: str, names: list[str]) -> None:
        self.kube = kube
        self.has = dict.fromkeys(names, spec_text)
        self.changed: list[str] = []
        self.reboot: set[str] = set()
        self.guarded: set[str] = set()

    def __call__(
        self, spec_path: Any, limit: str | None = None, on_event: Any = None, run: Any = None, locked: bool = False
    ) -> ApplyResult:
        wanted = spec_path.source.read_text()
        hosts = {}
        for name in (limit or "").split(","):
            if any(n == name and "systemctl reboot" in c for n, c in self.kube.node_commands):
                self.reboot.discard(name)
            needs = ["driver 580.95.05 installed: reboot to load it"] if name in self.reboot else []
            if self.has.get(name) == wanted:
                hosts[name] = HostResult(name, unchanged=1, reboot_required=needs)
                continue
            if name in self.guarded:
                assert self.kube.node(name)["unschedulable"], f"{name} changed while schedulable"
                assert self.kube.pods_on(name) == 0, f"{name} changed with pods on it"
            if name.startswith("kinf") or name in self.reboot:
                self.changed.append(name)  # the others take the live part of the change
            self.has[name] = wanted
            hosts[name] = HostResult(name, changed=["nvidia"], reboot_required=needs)
        return ApplyResult(hosts)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, StubKube, Deploys]:
    """The Kubernetes example applied (recorded), then its inference nodes' MIG layout changed
    (a rolling field of kinf01 and kinf02); each inference node runs one evictable pod."""
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml_text.dump(spec_data()))
    spec = load_spec(spec_file)
    record_applied(Cluster.of(spec, spec_file))
    names = [n.name for n in resolve_nodes(spec)]
    kube = StubKube(tmp_path / "kube", "kcp1", names)
    kube.update(lambda d: d["pods"].extend({"node": n, "pdb_blocked": False} for n in ("kinf01", "kinf02")))
    deploys = Deploys(kube, spec_file.read_text(), names)
    deploys.guarded = {"kinf01", "kinf02"}
    spec_file.write_text(yaml_text.dump(spec_data({"2g.20gb": 3})))
    monkeypatch.setattr(remote, "run", kube.remote_run)
    monkeypatch.setattr(remote, "wait_reachable", lambda *a, **k: True)
    monkeypatch.setattr(apply_mod, "run_deploys", deploys)
    monkeypatch.setattr(apply_mod, "validate_nodes", lambda _path, nodes: {})
    locks = tmp_path / "node-locks"
    lock_nodes_locally(monkeypatch, locks)  # the real lock command, on a local file per node
    return spec_file, kube, deploys


def test_each_batch_is_cordoned_and_drained_before_it_changes_and_given_back_after(cluster: Any) -> None:
    spec_file, kube, deploys = cluster
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok and not result.waiting, {n: h.error for n, h in result.hosts.items() if h.error}
    assert deploys.changed == ["kinf01", "kinf02"]
    for name in ("kinf01", "kinf02"):
        node = kube.node(name)
        assert node["history"] == ["cordon", "drain", "uncordon"] and not node["unschedulable"]
        assert MARK not in node["annotations"]
    assert last_applied(load_cluster(spec_file)) == load_spec(spec_file)


def test_an_operators_cordon_is_kept_and_changed_only_when_included(cluster: Any) -> None:
    spec_file, kube, deploys = cluster
    kube.update(lambda d: d["nodes"]["kinf02"].update(unschedulable=True))  # cordoned by hand
    result = apply_mod.apply(load_cluster(spec_file))
    assert apply_exit_code(result) == 3 and "drained by an operator (cordoned" in result.waiting["kinf02"]
    assert deploys.changed == ["kinf01"] and kube.node("kinf02")["history"] == []
    result = apply_mod.apply(load_cluster(spec_file), include_drained=True)
    assert result.ok and not result.waiting
    assert deploys.changed == ["kinf01", "kinf02"]
    node = kube.node("kinf02")
    assert node["history"] == ["drain"] and node["unschedulable"] and MARK not in node["annotations"]  # still theirs


def test_a_disruption_budget_that_holds_stops_the_rollout_with_the_node_cordoned(cluster: Any) -> None:
    spec_file, kube, deploys = cluster
    kube.update(lambda d: d["pods"].append({"node": "kinf01", "pdb_blocked": True}))
    result = apply_mod.apply(load_cluster(spec_file))
    assert apply_exit_code(result) == 1
    assert "violate the pod's disruption budget" in (result.hosts["kinf01"].error or "")
    assert deploys.changed == [] and kube.node("kinf02")["history"] == []  # the next batch never started
    node = kube.node("kinf01")
    assert node["unschedulable"] and node["annotations"][MARK] == "rolling-change"  # ours, for the next run
    kube.update(lambda d: d.update(pods=[p for p in d["pods"] if not p["pdb_blocked"]]))  # the budget allows it now
    result = apply_mod.apply(load_cluster(spec_file))
    assert result.ok and deploys.changed == ["kinf01", "kinf02"]
    assert not kube.node("kinf01")["unschedulable"] and MARK not in kube.node("kinf01")["annotations"]


def test_a_new_gpu_node_is_ready_after_one_apply_with_allow_reboot(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first bring-up whose GPU worker needs a reboot for its driver: one ``apply --allow-reboot``
    cordons it, reboots it, converges it again (the driver loaded) and uncordons it."""
    spec_file, kube, deploys = cluster
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "fresh-state"))  # no record: a first bring-up
    deploys.guarded = set()
    deploys.reboot = {"kgpu01"}
    result = apply_mod.apply(load_cluster(spec_file), allow_reboot=True)
    assert result.ok and not result.waiting, result.waiting
    assert [n for n, c in kube.node_commands if "systemctl reboot" in c] == ["kgpu01"]
    assert kube.node("kgpu01")["history"] == ["cordon", "drain", "uncordon"]
    assert not kube.node("kgpu01")["unschedulable"] and not result.hosts["kgpu01"].reboot_required
    assert last_applied(load_cluster(spec_file)) == load_spec(spec_file)
