"""The Kubernetes cluster checks from kubectl JSON (fixtures/kubectl/, see its SOURCES.md): the GPU
Operator's pods judged in dependency order, and the tenants' queues against the spec."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpuforge.spec import resolve_nodes
from gpuforge.validator import cluster, cluster_k8s
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS, SKIP
from tests.conftest import REPO
from tests.helpers import variant

FIXTURES = Path(__file__).parent / "fixtures" / "kubectl"
UPSTREAM = REPO.parent / "shared" / "reference" / "upstream"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def crd_schema(path: Path, version: str) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    return next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]


def data_for(spec: Any, pods: dict[str, Any] | None = None, queues: dict[str, Any] | None = None) -> Any:
    nodes = resolve_nodes(spec)
    plane = next(n for n in nodes if n.name == "kcp1")
    data = cluster.ClusterData(spec, Path("s.yaml"), nodes, kube_node=plane.name)
    parts = ["__section=nodes", json.dumps({"items": []}), "__rc=0"]
    parts += ["__section=pods", json.dumps(pods or {"items": []}), "__rc=0"]
    if queues is not None:
        parts += ["__section=queues", json.dumps(queues), "__rc=0"]
    cluster_k8s.apply_kube_query(data, "\n".join(parts))
    return data, plane


def operator_spec(**gpu_operator: Any) -> Any:
    def change(d: dict[str, Any]) -> None:
        d["kubernetes"]["gpu_operator"].update(gpu_operator)
        if gpu_operator.get("dcgm_exporter"):
            d["dcgm"] = {"enabled": False, "exporter": False}

    return variant("k8s-gpu-operator", change)


def set_pod(pods: dict[str, Any], prefix: str, phase: str, ready: bool, waiting: str | None = None) -> dict[str, Any]:
    out = copy.deepcopy(pods)
    pod = next(p for p in out["items"] if p["metadata"]["name"].startswith(prefix))
    pod["status"]["phase"] = phase
    cs = pod["status"]["containerStatuses"][0]
    cs["ready"] = ready
    if waiting:
        cs["state"] = {"waiting": {"reason": waiting}}
    return out


# --------------------------------------------------------------------------- the fixtures themselves


def test_the_fixtures_are_valid_api_objects() -> None:
    for pod in fixture("gpu-operator-pods.json")["items"]:
        assert kubernetes_validate.validate(pod, "1.31", strict=True) == "1.31"
    cq = crd_schema(UPSTREAM / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml", "v1beta2")
    for q in fixture("kueue-clusterqueues.json")["items"]:
        jsonschema.validate(q, cq)
    vq = crd_schema(UPSTREAM / "volcano" / "scheduling.volcano.sh_queues.yaml", "v1beta1")
    for q in fixture("volcano-queues.json")["items"]:
        jsonschema.validate(q, vq)


# --------------------------------------------------------------------------- operator pods in order


def test_every_component_ready_passes() -> None:
    spec = operator_spec(driver="operator", toolkit="operator", dcgm_exporter=True)
    data, plane = data_for(spec, fixture("gpu-operator-pods.json"))
    status, msg = cluster_k8s.k8s_operator_pods(data, plane)
    assert status == PASS and "driver, container toolkit, device plugin, dcgm-exporter" in msg


def test_a_crashing_device_plugin_is_the_cause_when_the_driver_is_fine() -> None:
    spec = operator_spec(driver="operator", toolkit="operator", dcgm_exporter=True)
    pods = set_pod(fixture("gpu-operator-pods.json"), "nvidia-device-plugin", "Running", False, "CrashLoopBackOff")
    pods = set_pod(pods, "nvidia-dcgm-exporter", "Pending", False)  # waits for the device plugin
    status, msg = cluster_k8s.k8s_operator_pods(*data_for(spec, pods))
    assert status == FAIL
    assert msg.startswith("device plugin not ready: nvidia-device-plugin-daemonset-8m2np (Running, CrashLoopBackOff)")


def test_the_driver_is_named_first_when_it_fails() -> None:
    spec = operator_spec(driver="operator", toolkit="operator", dcgm_exporter=True)
    pods = set_pod(fixture("gpu-operator-pods.json"), "nvidia-driver-daemonset", "Running", False, "CrashLoopBackOff")
    pods = set_pod(pods, "nvidia-device-plugin", "Pending", False)
    status, msg = cluster_k8s.k8s_operator_pods(*data_for(spec, pods))
    assert status == FAIL and msg.startswith("driver not ready: nvidia-driver-daemonset-9bq4c")


def test_host_managed_components_are_not_expected_from_the_operator() -> None:
    spec = variant("k8s-gpu-operator", lambda d: None)  # host driver, toolkit, DCGM and exporter
    pods = fixture("gpu-operator-pods.json")
    pods["items"] = [p for p in pods["items"] if not p["metadata"]["name"].startswith(("nvidia-driver",
                     "nvidia-container-toolkit", "nvidia-dcgm-exporter"))]  # fmt: skip
    status, msg = cluster_k8s.k8s_operator_pods(*data_for(spec, pods))
    assert (status, msg.split(" (")[-1]) == (PASS, "device plugin)")
    pods["items"] = [p for p in pods["items"] if not p["metadata"]["name"].startswith("nvidia-device-plugin")]
    status, msg = cluster_k8s.k8s_operator_pods(*data_for(spec, pods))
    assert status == FAIL and msg.startswith("no device plugin pods (nvidia-device-plugin-*)")


def test_other_pods_not_ready_still_fail() -> None:
    pods = set_pod(fixture("gpu-operator-pods.json"), "gpu-feature-discovery", "Pending", False)
    status, msg = cluster_k8s.k8s_operator_pods(*data_for(variant("k8s-gpu-operator", lambda d: None), pods))
    assert status == FAIL and "gpu-feature-discovery-5xk2p (Pending)" in msg


# --------------------------------------------------------------------------- queues


def test_kueue_queues_match_the_spec() -> None:
    spec = variant("k8s-gpu-operator", lambda d: None)
    status, msg = cluster_k8s.k8s_queues(*data_for(spec, queues=fixture("kueue-clusterqueues.json")))
    assert (status, msg) == (PASS, "2 kueue queue(s) with the spec's GPU quotas")


def test_a_quota_off_the_spec_a_missing_queue_and_an_inactive_one_fail() -> None:
    spec = variant("k8s-gpu-operator", lambda d: None)
    queues = fixture("kueue-clusterqueues.json")
    vision = queues["items"][0]
    vision["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = 16
    vision["status"]["conditions"][0].update(status="False", reason="FlavorNotFound")
    status, msg = cluster_k8s.k8s_queues(*data_for(spec, queues=queues))
    assert status == FAIL
    assert msg == "vision: nvidia.com/gpu quota 16, the spec says 32; vision: not Active: FlavorNotFound"
    queues["items"] = [vision]
    assert "language: missing" in cluster_k8s.k8s_queues(*data_for(spec, queues=queues))[1]


def test_volcano_queues_are_read_by_their_deserved_gpus() -> None:
    spec = variant(
        "k8s-gpu-operator", lambda d: d["kubernetes"]["batch_queue"].update(kind="volcano", version="v1.15.1")
    )
    queues = fixture("volcano-queues.json")
    assert cluster_k8s.k8s_queues(*data_for(spec, queues=queues))[0] == PASS
    queues["items"][1]["status"]["state"] = "Closed"
    assert cluster_k8s.k8s_queues(*data_for(spec, queues=queues)) == (FAIL, "language: state Closed")


def test_queues_unread_or_not_in_the_spec() -> None:
    spec = variant("k8s-gpu-operator", lambda d: None)
    data, plane = data_for(spec)  # no queues section: kubectl was not asked, or failed
    assert cluster_k8s.k8s_queues(data, plane)[0] == FAIL
    none = variant("k8s-gpu-operator", lambda d: d["kubernetes"].update(batch_queue={"kind": "none"}))
    assert cluster_k8s.k8s_queues(*data_for(none))[0] == SKIP


@pytest.mark.parametrize(("kind", "resource"), [("kueue", "clusterqueues.kueue.x-k8s.io"),
                                                ("volcano", "queues.scheduling.volcano.sh")])  # fmt: skip
def test_the_query_asks_for_the_queues_of_the_spec(kind: str, resource: str) -> None:
    query = cluster_k8s.kube_query("gpu-operator", kind)
    assert f"get {resource} -o json" in query and "__section=queues" in query
    assert "__section=queues" not in cluster_k8s.kube_query("gpu-operator", "none")
    assert "get pods -n 'a b'" in cluster_k8s.kube_query("a b")  # quoted: a value never adds a word


# --------------------------------------------------------------------------- the probe, run for real in sh

FAKE_KUBECTL = r"""#!/bin/sh
# kubectl stand-in: logs every call; creates read their manifest from stdin into $KSTATE
[ "$1" = --kubeconfig ] && shift 2
echo "$*" >> "$KSTATE/log"
case "$1" in
  create) n=$(ls "$KSTATE" | grep -c manifest); cat > "$KSTATE/manifest$n" ;;
  wait) [ "$FAKE_PHASE" = Succeeded ] ;;
  get) case "$*" in
         *workloads*) printf '%s' "$FAKE_ADMITTED" ;;
         *pod/*) printf '%s' "$FAKE_PHASE" ;;
       esac ;;
  logs) printf '[Vector addition of 50000 elements]\nCopy input data to the CUDA device\nTest PASSED\nDone\n' ;;
  delete) ;;
esac
"""


def run_probe(tmp_path: Path, spec: Any, phase: str, admitted: str) -> tuple[str, Path]:
    import os
    import subprocess

    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")  # the admission wait, without waiting
    (bin_dir / "sleep").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KSTATE": str(state),
           "FAKE_PHASE": phase, "FAKE_ADMITTED": admitted}  # fmt: skip
    cp = subprocess.run(["sh", "-c", cluster_k8s.probe_query(spec)], env=env, capture_output=True, text=True,
                        timeout=60)  # fmt: skip
    return cp.stdout, state


def test_the_probe_runs_the_cuda_sample_and_a_job_per_tenant_and_cleans_up(tmp_path: Path) -> None:
    spec = variant("k8s-gpu-operator", lambda d: None)
    out, state = run_probe(tmp_path, spec, "Succeeded", "True")
    probe = cluster_k8s.parse_probe(out)
    assert probe["cuda"][0] == "Succeeded" and "Test PASSED" in probe["cuda"][1]
    assert probe["admission"] == {"team-vision": "True", "team-language": "True"}
    pod = yaml.safe_load((state / "manifest0").read_text())
    assert pod["metadata"]["name"].startswith("gpuforge-probe-") and pod["metadata"]["name"].endswith("-cuda")
    assert pod["spec"]["containers"][0]["image"] == cluster_k8s.CUDA_SAMPLE_IMAGE
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert kubernetes_validate.validate(pod, "1.31", strict=True) == "1.31"
    jobs = [yaml.safe_load((state / f"manifest{i}").read_text()) for i in (1, 2)]
    assert [j["metadata"]["namespace"] for j in jobs] == ["team-vision", "team-language"]
    for job in jobs:
        assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "default"} and job["spec"]["suspend"]
        assert kubernetes_validate.validate(job, "1.31", strict=True) == "1.31"
    log = (state / "log").read_text()
    name = pod["metadata"]["name"]
    assert f"delete pod -n default {name} --ignore-not-found" in log  # cleaned up whatever happened
    assert log.count("delete job -n team-") == 2

    data, plane = data_for(spec)
    data.kube_probe = probe
    assert cluster_k8s.k8s_cuda_sample(data, plane)[0] == PASS
    assert cluster_k8s.k8s_queue_admission(data, plane)[0] == PASS


def test_a_failed_sample_and_a_job_never_admitted_fail(tmp_path: Path) -> None:
    spec = variant("k8s-gpu-operator", lambda d: None)
    out, _ = run_probe(tmp_path, spec, "Failed", "False")
    data, plane = data_for(spec)
    data.kube_probe = cluster_k8s.parse_probe(out)
    status, msg = cluster_k8s.k8s_cuda_sample(data, plane)
    assert status == FAIL and msg.startswith("the CUDA sample pod ended Failed within 300 s")
    status, msg = cluster_k8s.k8s_queue_admission(data, plane)
    assert status == FAIL and "team-vision: False" in msg and "team-language: False" in msg
    data.kube_probe = None
    assert cluster_k8s.k8s_cuda_sample(data, plane)[0] == BLOCKED
