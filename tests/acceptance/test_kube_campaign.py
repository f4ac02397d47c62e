"""Kubernetes campaigns through a real shell against a stub kubectl whose answers change as a cluster's
would (tests/acceptance/stub_kube_jobs.py): Jobs applied server-side, pending, running the real node
runner, complete or failed; logs read; Jobs deleted; failed nodes cordoned and tainted (an operator's
or a rollout's cordon kept); a healthy spare labelled into its node group; the swap recorded."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuforge.acceptance import campaign as campaign_mod
from gpuforge.acceptance import kube_actions, kube_campaign, spares
from gpuforge.acceptance.campaign import Cluster
from gpuforge.cli import app
from gpuforge.spec import Spec, load_spec
from gpuforge.spec.cluster import Cluster as Loaded
from tests import yaml_text
from tests.acceptance.conftest import STRESS_STUB
from tests.acceptance.stub_kube_jobs import StubKubeJobs
from tests.helpers import INVENTORIES

WORKERS = ["kmon1", "kgpu01", "kgpu02", "kgpu03", "kgpu04", "kgpu05", "kinf01", "kinf02"]
POOL = {"partition": "gpu", "nodes": "kgpu05", "size": 4, "labels": {"gpuforge.dev/pool": "gpu"},
        "spare_taints": ["gpuforge.dev/spare=true:NoSchedule"]}  # fmt: skip


def k8s_data(**acceptance: Any) -> dict[str, Any]:
    """The Kubernetes example: root over SSH, GPU steps off (no GPU here), gpu = kgpu[01-04], spare kgpu05."""
    data = yaml.safe_load((INVENTORIES / "k8s-gpu-operator.yaml").read_text())
    data["ssh"] = {"user": "root", "sudo": False}
    groups = {g["name"]: g for g in data["node_groups"]}
    groups["gpu"]["hosts"] = "kgpu[01-04]"
    for tenant in data["kubernetes"]["batch_queue"]["tenants"]:
        tenant.update(gpu_quota=16, borrowing_limit=8) if "borrowing_limit" in tenant else tenant.update(gpu_quota=16)
    data["node_groups"].append({**groups["gpu"], "name": "spare", "hosts": "kgpu05", "address_start": "198.51.100.110"})
    data["acceptance"] = {"steps": {"cpu": {"seconds": 1}, "memory": {"seconds": 1}, "dcgm": {"enabled": False},
                                    "nccl": {"enabled": False}}, "start_timeout_s": 120, **acceptance}  # fmt: skip
    return data


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StubKubeJobs:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    stub = StubKubeJobs(tmp_path / "kube", "kcp1", WORKERS, {"stress-ng": STRESS_STUB})
    for n in ("kgpu01", "kgpu02", "kgpu03", "kgpu04"):
        stub.set_node(n, labels={"gpuforge.dev/pool": "gpu"})
    stub.set_node("kgpu05", taints=[{"key": "gpuforge.dev/spare", "value": "true", "effect": "NoSchedule"}])
    return stub


@pytest.fixture
def spec_file(tmp_path: Path) -> Callable[..., tuple[Spec, Path]]:
    def make(**acceptance: Any) -> tuple[Spec, Path]:
        path = tmp_path / "k8s.yaml"
        path.write_text(yaml_text.dump(k8s_data(**acceptance), sort_keys=False))
        return load_spec(path), path

    return make


def test_campaign_runs_jobs_judges_cordons_and_brings_in_a_spare(kube: StubKubeJobs, spec_file: Callable) -> None:
    spec, path = spec_file(spares=[POOL])
    kube.set_node("kinf02", unschedulable=True)  # an operator's cordon: no gpuforge mark
    kube.env.update(STUB_RATES="kgpu01=2100,kgpu02=2150,kgpu03=420,kgpu04=2120,kgpu05=2110", STUB_STRESS_FAIL="kgpu04",
                    STUB_POD_CRASH="kinf01")  # fmt: skip
    camp = kube_campaign.run_kube_campaign(Loaded.of(spec, path), transport=kube, poll_s=0.05)
    kube_campaign.restore_capacity(Cluster(Loaded.of(spec, path), kube), spec, camp)
    doc = camp.to_dict()
    status = {n["node"]: n["status"] for n in doc["nodes"]}
    assert status == {"kmon1": "pass", "kgpu01": "pass", "kgpu02": "pass", "kgpu03": "outlier",
                      "kgpu04": "fail", "kgpu05": "pass", "kinf01": "error", "kinf02": "untested"}  # fmt: skip
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert nodes["kinf02"]["untested"] == "cordoned (operator): left as it is"
    assert "python3: not found" in nodes["kinf01"]["steps"][0]["message"], nodes["kinf01"]
    assert [(o.node, o.group, o.step) for o in camp.outliers] == [("kgpu03", "gpu", "cpu"), ("kgpu03", "gpu", "memory")]
    assert {s["step"]: s["status"] for s in nodes["kgpu01"]["steps"]} == {"cpu": "pass", "memory": "pass",
                                                                          "container": "pass"}  # fmt: skip

    calls = kube.calls()
    applies = [c for c in calls if c.startswith("kubectl apply")]
    assert len(applies) == 1 and "--server-side --field-manager=gpuforge-accept" in applies[0], "one apply for all"
    polls = [c for c in calls if c.startswith("kubectl get jobs")]
    assert len(polls) >= 3, "pending, running, then done"
    assert sum(c.startswith("kubectl logs") for c in calls) == 7, "a log per finished Job"
    state = kube.read()
    assert state["jobs"] == {} and sorted(state["deleted"]) == sorted(state["applied"]), "every Job deleted"
    assert calls[-1].startswith("kubectl taint node kgpu05 gpuforge.dev/spare:NoSchedule-")
    assert set(kube.targets) == {"kcp1"}, "every command ran on the first control plane"

    bad = state["nodes"]["kgpu04"]
    assert bad["unschedulable"] and bad["annotations"]["gpuforge.dev/cordoned-by"] == "accept"
    assert bad["annotations"]["gpuforge.dev/accept-reason"].startswith("gpuforge: accept: cpu: ")
    assert {"key": "gpuforge.dev/accept-failed", "value": "cpu", "effect": "NoSchedule"} in bad["taints"]
    held = state["nodes"]["kinf02"]
    assert held["unschedulable"] and held["annotations"] == {} and held["taints"] == [], "the operator's cordon kept"
    assert not state["nodes"]["kgpu03"]["unschedulable"], "an outlier is reported, not cordoned"
    assert not state["nodes"]["kinf01"]["unschedulable"], "a step that could not run is no cordon"
    spare = state["nodes"]["kgpu05"]
    assert spare["labels"] == {"gpuforge.dev/pool": "gpu"} and spare["taints"] == []
    assert [a for a in camp.actions if a["action"] == "spare-in"] == [{
        "action": "spare-in", "partition": "gpu", "spare": "kgpu05", "replaces": "kgpu04", "result": "moved",
        "reason": "kgpu04 is out of service (cordoned by gpuforge accept)"}]  # fmt: skip
    record = spares.load_record(spec.cluster.name)
    assert record.moved_in == {"gpu": ["kgpu05"]} and record.swaps[0]["campaign"] == camp.id
    assert camp.exit_code == 1


def test_report_only_fails_the_node_and_cordons_nothing(kube: StubKubeJobs, spec_file: Callable) -> None:
    """``gpuforge accept --no-act`` on Kubernetes: the same judgement, no cordon nor taint."""
    spec, path = spec_file()
    kube.env.update(STUB_STRESS_FAIL="kgpu04")
    camp = kube_campaign.run_kube_campaign(
        Loaded.of(spec, path), names=["kgpu03", "kgpu04"], transport=kube, poll_s=0.05, act=False
    )
    assert camp.node("kgpu04").status == "fail"  # type: ignore[union-attr]
    node = kube.read()["nodes"]["kgpu04"]
    assert not node["unschedulable"] and node["taints"] == [] and camp.actions == []


def test_a_pod_that_never_starts_has_its_job_deleted_and_its_node_untested(
    kube: StubKubeJobs, spec_file: Callable
) -> None:
    spec, path = spec_file(start_timeout_s=1)
    kube.env.update(STUB_NEVER_START="kmon1")
    camp = kube_campaign.run_kube_campaign(Loaded.of(spec, path), names=["kmon1"], transport=kube, poll_s=0.05)
    assert "its pod did not start within 1 s (ErrImagePull): Job deleted" in (camp.node("kmon1").untested or "")  # type: ignore[union-attr]
    calls = kube.calls()
    assert not any(c.startswith("kubectl logs") for c in calls), "no log read from a Job that never ran"
    deletes = [c for c in calls if c.startswith("kubectl delete jobs")]
    assert deletes[0].endswith(f"{kube_actions.job_name(camp.id, 'kmon1')} --ignore-not-found --wait=false")
    assert kube.read()["jobs"] == {} and camp.exit_code == 2, "nothing ran"


def test_a_node_cordoned_meanwhile_is_kept_as_it_is(kube: StubKubeJobs, spec_file: Callable) -> None:
    spec, path = spec_file()
    kube.env.update(STUB_STRESS_FAIL="kgpu02", STUB_CORDON_DURING="kgpu02")
    camp = kube_campaign.run_kube_campaign(Loaded.of(spec, path), names=["kgpu01", "kgpu02", "kgpu03"], transport=kube,
                                           poll_s=0.05)  # fmt: skip
    assert [a["result"] for a in camp.actions] == ["kept: cordoned by someone else (no mark)"]
    node = kube.read()["nodes"]["kgpu02"]
    assert node["unschedulable"] and node["annotations"] == {} and node["taints"] == []


def test_a_rollouts_cordon_is_not_tested_nor_taken_over(kube: StubKubeJobs, spec_file: Callable) -> None:
    spec, path = spec_file()
    kube.set_node("kgpu01", unschedulable=True, annotations={"gpuforge.dev/cordoned-by": "rolling-change"})
    camp = kube_campaign.run_kube_campaign(
        Loaded.of(spec, path), names=["kgpu01", "kgpu02"], transport=kube, poll_s=0.05
    )
    assert camp.node("kgpu01").untested == "cordoned (rolling-change): left as it is"  # type: ignore[union-attr]
    assert kube.read()["nodes"]["kgpu01"]["history"] == [], "nothing done to it"


def test_jobs_are_deleted_when_the_campaign_is_interrupted(kube: StubKubeJobs, spec_file: Callable) -> None:
    spec, path = spec_file()

    def interrupt(message: str) -> None:
        if "running" in message:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        kube_campaign.run_kube_campaign(Loaded.of(spec, path), names=["kgpu01", "kgpu02"], transport=kube, poll_s=0.05,
                                        say=interrupt)  # fmt: skip
    state = kube.read()
    assert state["applied"] and state["jobs"] == {}, "the Jobs were deleted on the way out"
    assert kube.calls()[-1].startswith("kubectl delete jobs -n default -l gpuforge.dev/campaign=")


def test_job_manifest_is_pinned_bounded_and_cleaned_up(spec_file: Callable) -> None:
    spec, _ = spec_file(kubernetes={"namespace": "accept", "ttl_seconds_after_finished": 600})
    node = next(n for n in campaign_mod.resolve_nodes(spec) if n.name == "kgpu01")
    job = kube_actions.kube_job(spec, node, "20261126T081500.123Z-0123456789ab")
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["name"] == "gfaccept-20261126081500123-kgpu01"
    assert job["metadata"]["namespace"] == "accept" and job["spec"]["ttlSecondsAfterFinished"] == 600
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] > 0
    assert pod["nodeName"] == "kgpu01" and pod["restartPolicy"] == "Never" and pod["tolerations"] == [
        {"operator": "Exists"}]  # fmt: skip
    assert job["spec"]["template"]["metadata"]["labels"]["gpuforge.dev/node"] == "kgpu01"
    assert pod["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 8}}
    long = kube_actions.job_name("20261126T081500.123Z-x", "n" * 60)
    assert len(long) <= 63 and long.startswith("gfaccept-20261126081500123-")


def test_cli_accept_on_kubernetes(kube: StubKubeJobs, spec_file: Callable, monkeypatch: pytest.MonkeyPatch) -> None:
    _, path = spec_file()
    monkeypatch.setattr(campaign_mod, "SshTransport", lambda *a, **k: kube)
    kube.env.update(STUB_STRESS_FAIL="kgpu02")
    out = CliRunner().invoke(app, ["accept", str(path), "--json", "--poll", "0.05", "--limit", "kgpu[01-04]"],
                             catch_exceptions=False)  # fmt: skip
    assert out.exit_code == 1, out.output
    doc = json.loads(out.stdout)
    assert doc["summary"] == {"pass": 3, "fail": 1, "error": 0, "outlier": 0, "untested": 0}
    assert [a["action"] for a in doc["actions"]] == ["cordon"] and doc["actions"][0]["result"] == "cordoned and tainted"
    saved = Path(doc["saved"])
    assert (saved.parent / "report.html").exists() and (saved.parent / "raw" / "kgpu01.log").exists()
    page = (saved.parent / "report.html").read_text()
    assert "cordon kgpu02: cordoned and tainted" in page.split('id="actions"', 1)[1]


def test_replace_on_kubernetes(kube: StubKubeJobs, spec_file: Callable, monkeypatch: pytest.MonkeyPatch) -> None:
    """A campaign saved with every node passed; then kgpu02 is replaced on request: cordoned and tainted with
    the replace reason, the spare labelled in, the swap recorded; the pool is empty afterwards."""
    from gpuforge.acceptance import kube_replace, results

    spec, path = spec_file(spares=[POOL])
    camp = kube_campaign.run_kube_campaign(Loaded.of(spec, path), transport=kube, poll_s=0.05)
    results.save(camp)
    out = kube_replace.replace_node(Cluster(Loaded.of(spec, path), kube), spec, "kgpu02")
    assert out.ok, out.message
    state = kube.read()["nodes"]
    reason = state["kgpu02"]["annotations"]["gpuforge.dev/accept-reason"]
    assert state["kgpu02"]["unschedulable"] and reason == "gpuforge: replace: taken out by gpuforge replace"
    assert state["kgpu05"]["labels"] == {"gpuforge.dev/pool": "gpu"} and state["kgpu05"]["taints"] == []
    assert spares.load_record(spec.cluster.name).moved_in == {"gpu": ["kgpu05"]}
    again = kube_replace.replace_node(Cluster(Loaded.of(spec, path), kube), spec, "kgpu03")
    assert not again.ok and "no healthy spare left" in again.message
    monkeypatch.setattr(campaign_mod, "SshTransport", lambda *a, **k: kube)
    back = CliRunner().invoke(app, ["replace", str(path), "kgpu02", "--back"])
    assert back.exit_code == 2 and "Slurm only" in back.output


KUBE_BAD = [
    ("no-labels", {"spares": [{**POOL, "labels": {}}]}, "acceptance.spares[0].labels: a Kubernetes pool needs"),
    ("no-group", {"spares": [{**POOL, "partition": "batch"}]}, "no node group 'batch' of k8s-worker nodes"),
    ("member", {"spares": [{**POOL, "nodes": "kgpu02"}]}, "kgpu02 is in node group gpu already"),
    ("not-worker", {"spares": [{**POOL, "nodes": "kcp1"}]}, "kcp1 is not a k8s-worker node"),
    ("label-key", {"spares": [{**POOL, "labels": {"bad key": "x"}}]}, "is not a Kubernetes label key"),
    ("label-value", {"spares": [{**POOL, "labels": {"pool": "a;b"}}]}, "is not a Kubernetes label value"),
    (
        "taint",
        {"spares": [{**POOL, "spare_taints": ["spare=true:Never"]}]},
        "acceptance.spares[0].spare_taints[0]: 'spare=true:Never' is not a taint",
    ),
    ("namespace", {"kubernetes": {"namespace": "Bad_NS"}}, "acceptance.kubernetes.namespace"),
    ("ttl", {"kubernetes": {"ttl_seconds_after_finished": -1}}, "acceptance.kubernetes.ttl_seconds_after_finished"),
]


@pytest.mark.parametrize(("case", "section", "expect"), KUBE_BAD, ids=[b[0] for b in KUBE_BAD])
def test_bad_kubernetes_acceptance_exits_2_naming_the_field(
    tmp_path: Path, case: str, section: dict[str, Any], expect: str
) -> None:
    from tests.conftest import run_cli

    path = tmp_path / "k8s.yaml"
    path.write_text(yaml_text.dump(k8s_data(**section), sort_keys=False))
    cp = run_cli("check", str(path))
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert expect in cp.stderr and "Traceback" not in cp.stderr


def test_slurm_spares_refuse_kubernetes_fields(tmp_path: Path) -> None:
    from tests.acceptance.conftest import lab_spec
    from tests.conftest import run_cli

    def change(d: dict[str, Any]) -> None:
        d["slurm"]["partitions"] = [{"name": "batch", "nodes": "node[1-2]", "default": True},
                                    {"name": "spare", "nodes": "node3"}]  # fmt: skip
        d["acceptance"] = {"spares": [{"partition": "batch", "nodes": "node3", "size": 2, "labels": {"a": "b"}}]}

    cp = run_cli("check", str(lab_spec(tmp_path, change)))
    assert cp.returncode == 2 and "acceptance.spares[0].labels: Kubernetes only" in cp.stderr, cp.stderr


def test_the_jsonpath_templates_in_a_real_kubectl(spec_file: Callable) -> None:
    """Where a kubectl is installed, it evaluates gpuforge's own templates on Node, Job and Pod objects offline
    (``kubectl label --local -f OBJ -o jsonpath=...``: the template without its ``range .items`` loop, which
    ``kubectl get`` applies to the List), and the parsers read what it prints."""
    import shlex
    import shutil
    import subprocess

    from gpuforge.acceptance import kube_nodes

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl here: the templates are checked by the stub's answers only")
    spec, _ = spec_file()
    objects = Path(__file__).parent / "fixtures" / "kube"

    def apply(template: str, obj: str) -> str:
        inner = template.replace("{range .items[*]}", "", 1).rsplit("{end}", 1)[0]
        cp = subprocess.run([kubectl, "label", "--local", "-f", str(objects / obj), "x=y", "-o", f"jsonpath={inner}"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
        assert cp.returncode == 0, cp.stderr
        return cp.stdout

    def template(command: str) -> str:
        words = shlex.split(command)
        return words[words.index("-o") + 1].split("=", 1)[1]

    keys = ["gpuforge.dev/pool", "other.example/x"]
    node = kube_nodes.parse_nodes(apply(template(kube_nodes.nodes_command(keys)), "node.json"), keys)["kgpu01"]
    assert (node.unschedulable, node.mark, node.ready) == (True, "accept", "True")
    assert node.labels == {"gpuforge.dev/pool": "gpu"}
    assert node.failed_here and not node.in_service and node.has_taint("node.kubernetes.io/unschedulable:NoSchedule")
    jobs_cmd, pods_cmd = kube_actions.state_command(spec, "20261126T000000.000Z-x").split("; ")
    jobs, pods = kube_actions.parse_state(apply(template(jobs_cmd), "job.json") + apply(template(pods_cmd), "pod.json"))
    assert jobs["kgpu01"].done and jobs["kgpu01"].state == "COMPLETE" and jobs["kgpu01"].succeeded == 1
    assert pods == {"kgpu01": ("Pending", "ErrImagePull")}
