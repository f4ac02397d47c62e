"""The Kubernetes cluster checks from kubectl JSON (fixtures/kubectl/, see its SOURCES.md): the nodes'
GPUs and MIG devices against the spec, the GPU Operator's pods judged in dependency order, the
tenants' queues against the spec, and the active probe (CUDA sample, queue admission)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpuforge.render import kubernetes as k8s_render
from gpuforge.spec import SpecError, resolve_nodes
from gpuforge.spec.model import MigStrategy
from gpuforge.validator import cluster, cluster_k8s, k8s_probe
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


def data_for(
    spec: Any,
    pods: dict[str, Any] | None = None,
    queues: dict[str, Any] | None = None,
    nodes: dict[str, Any] | None = None,
) -> Any:
    resolved = resolve_nodes(spec)
    plane = next(n for n in resolved if n.name == "kcp1")
    data = cluster.ClusterData(spec, Path("s.yaml"), resolved, kube_node=plane.name)
    parts = ["__section=nodes", json.dumps(nodes or {"items": []}), "__rc=0"]
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
    for name in ("nodes-a16-vgpu-rke2.json", "nodes-h100-mig.json"):
        listed = fixture(name)
        assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
        for node in listed["items"]:
            assert kubernetes_validate.validate(node, "1.31", strict=True) == "1.31"
    cq = crd_schema(UPSTREAM / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml", "v1beta2")
    for q in fixture("kueue-clusterqueues.json")["items"]:
        jsonschema.validate(q, cq)
    vq = crd_schema(UPSTREAM / "volcano" / "scheduling.volcano.sh_queues.yaml", "v1beta1")
    for q in fixture("volcano-queues.json")["items"]:
        jsonschema.validate(q, vq)


def test_the_recorded_fixtures_are_valid_api_objects() -> None:
    listed = fixture("nodes-h20-mig-mixed-partial.json")
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    for node in listed["items"]:
        assert kubernetes_validate.validate(node, "1.31", strict=True) == "1.31"
    cq = crd_schema(UPSTREAM / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml", "v1beta1")  # Kueue 0.5.2 served it
    for q in fixture("kueue-clusterqueue-two-gpu-flavors.json")["items"]:
        assert q["apiVersion"] == "kueue.x-k8s.io/v1beta1"
        jsonschema.validate(q, cq)
    vq = crd_schema(UPSTREAM / "volcano" / "scheduling.volcano.sh_queues.yaml", "v1beta1")
    for q in fixture("volcano-queues-recorded.json")["items"]:
        jsonschema.validate(q, vq)


# --------------------------------------------------------------------------- GPUs and MIG devices per node


def node_as(name: str, source: str, item: int = 0, allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``kubectl get nodes -o json`` List holding one fixture node renamed to a spec node
    (its allocatable replaced where given)."""
    node = copy.deepcopy(fixture(source)["items"][item])
    node["metadata"]["name"] = name
    if allocatable is not None:
        node["status"]["allocatable"] = allocatable
    return {"apiVersion": "v1", "kind": "List", "items": [node]}


def worker(data: Any, name: str) -> Any:
    return next(n for n in data.nodes if n.name == name)


def infer_group(gpus: int, layout: str, strategy: str = "mixed", **configs: Any) -> Any:
    """The example's inference group (kinf01, kinf02) with ``gpus`` H100s laid out by ``layout``."""

    def change(d: dict[str, Any]) -> None:
        group = next(g for g in d["node_groups"] if g["name"] == "infer")
        group["hardware"]["gpu"]["count"] = gpus
        group["mig_config"] = layout
        d["mig"]["configs"].update(configs)
        d["kubernetes"]["gpu_operator"]["mig_strategy"] = strategy

    return variant("k8s-gpu-operator", change)


ALL_BALANCED = [{"devices": "all", "mig_devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}]


def allocatable(spec: Any, nodes: dict[str, Any], name: str) -> tuple[str, str]:
    data, _ = data_for(spec, nodes=nodes)
    return cluster_k8s.k8s_allocatable(data, worker(data, name))


def test_a_recorded_gpu_node_is_ready_and_offers_its_gpu() -> None:
    nodes = node_as("kgpu01", "nodes-a16-vgpu-rke2.json")  # recorded: one A16 vGPU, no MIG

    def one_gpu(d: dict[str, Any]) -> None:
        d["node_groups"][2]["hardware"]["gpu"]["count"] = 1
        for tenant in d["kubernetes"]["batch_queue"]["tenants"]:  # 24 GPUs on the workers now
            tenant.update(gpu_quota=8, borrowing_limit=None)

    one = variant("k8s-gpu-operator", one_gpu)
    data, _ = data_for(one, nodes=nodes)
    assert cluster_k8s.k8s_ready(data, worker(data, "kgpu01")) == (PASS, "kgpu01 is Ready")
    assert allocatable(one, nodes, "kgpu01") == (PASS, "1 nvidia.com/gpu allocatable")
    eight = variant("k8s-gpu-operator", lambda d: None)
    assert allocatable(eight, nodes, "kgpu01") == (
        FAIL, "1 nvidia.com/gpu allocatable, expected 8 (device plugin not running?)")  # fmt: skip


def test_mixed_strategy_counts_each_profile_and_no_full_gpus() -> None:
    spec = infer_group(1, "all-balanced", **{"all-balanced": ALL_BALANCED})
    nodes = node_as("kinf01", "nodes-h100-mig.json", 0)  # NVIDIA's all-balanced H100, mixed
    assert allocatable(spec, nodes, "kinf01") == (PASS, (
        "2 nvidia.com/mig-1g.10gb, 1 nvidia.com/mig-2g.20gb, 1 nvidia.com/mig-3g.40gb allocatable "
        "(MIG layout all-balanced, mixed strategy)"))  # fmt: skip


def test_the_example_mig_nodes_offer_56_mig_devices_and_no_gpu() -> None:
    spec = variant("k8s-gpu-operator", lambda d: None)  # kinf01: 8 x H100, all-1g (7 x 1g.10gb), mixed
    mig56 = node_as("kinf01", "nodes-h100-mig.json", 0, {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "56"})
    assert allocatable(spec, mig56, "kinf01") == (
        PASS, "56 nvidia.com/mig-1g.10gb allocatable (MIG layout all-1g, mixed strategy)")  # fmt: skip
    why = "(MIG layout all-1g, mixed strategy: layout not applied, or the device plugin not running)"
    too_few = node_as("kinf01", "nodes-h100-mig.json", 0, {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "28"})
    assert allocatable(spec, too_few, "kinf01") == (FAIL, f"28 nvidia.com/mig-1g.10gb allocatable, expected 56 {why}")
    no_mig = node_as("kinf01", "nodes-h100-mig.json", 0, {"nvidia.com/gpu": "1"})  # passed before: "gpu >= 1"
    assert allocatable(spec, no_mig, "kinf01") == (FAIL, (
        f"1 nvidia.com/gpu allocatable, expected 0; "
        f"0 nvidia.com/mig-1g.10gb allocatable, expected 56 {why}"))  # fmt: skip


def test_another_layout_than_the_spec_names_what_differs() -> None:
    spec = infer_group(1, "all-1g")  # 7 x 1g.10gb on one GPU; the node has NVIDIA's all-balanced
    status, msg = allocatable(spec, node_as("kinf01", "nodes-h100-mig.json", 0), "kinf01")
    assert (status, msg.split(" (")[0]) == (FAIL, (
        "2 nvidia.com/mig-1g.10gb allocatable, expected 7; "
        "1 nvidia.com/mig-2g.20gb allocatable, expected none; "
        "1 nvidia.com/mig-3g.40gb allocatable, expected none"))  # fmt: skip


def h20_group(layout: list[dict[str, Any]]) -> Any:
    """The inference group as the recorded H20 node (nodes-h20-mig-mixed-partial.json): 8 GPUs, mixed
    strategy, ``layout`` as its MIG config. gpuforge knows no H20; GH200-96GB has the same MIG profile
    names (1g.12gb, 1g.24gb, 3g.48gb), and the check compares resources by profile name only."""

    def change(d: dict[str, Any]) -> None:
        group = next(g for g in d["node_groups"] if g["name"] == "infer")
        group["hardware"]["gpu"].update(model="GH200-96GB", count=8)
        group["arch"] = "aarch64"  # a Grace model: check refuses it on x86_64
        group["mig_config"] = "split"
        d["mig"]["configs"]["split"] = layout
        d["kubernetes"]["gpu_operator"]["mig_strategy"] = "mixed"

    return variant("k8s-gpu-operator", change)


RECORDED_H20_SPLIT = {"1g.12gb": 2, "1g.24gb": 1, "3g.48gb": 1}  # its GPU 3 (mig.config zkj-pa-uat-gpu-004)


def test_a_recorded_mixed_node_with_one_gpu_split_offers_seven_gpus_and_its_mig_devices() -> None:
    nodes = node_as("kinf01", "nodes-h20-mig-mixed-partial.json")  # recorded allocatable, labels
    spec = h20_group([{"devices": [3], "mig_devices": RECORDED_H20_SPLIT}])
    assert allocatable(spec, nodes, "kinf01") == (PASS, (
        "7 nvidia.com/gpu, 2 nvidia.com/mig-1g.12gb, 1 nvidia.com/mig-1g.24gb, 1 nvidia.com/mig-3g.48gb "
        "allocatable (MIG layout split, mixed strategy)"))  # fmt: skip
    two = h20_group([{"devices": [3, 4], "mig_devices": RECORDED_H20_SPLIT}])  # the node has one GPU split
    assert allocatable(two, nodes, "kinf01") == (FAIL, (
        "7 nvidia.com/gpu allocatable, expected 6; 2 nvidia.com/mig-1g.12gb allocatable, expected 4; "
        "1 nvidia.com/mig-1g.24gb allocatable, expected 2; 1 nvidia.com/mig-3g.48gb allocatable, expected 2 "
        "(MIG layout split, mixed strategy: layout not applied, or the device plugin not running)"))  # fmt: skip


def test_single_strategy_offers_mig_devices_as_gpus() -> None:
    nodes = node_as("kinf01", "nodes-h100-mig.json", 1)  # NVIDIA's single-strategy all-1g.10gb H100: 7
    one = infer_group(1, "all-1g", "single")
    assert allocatable(one, nodes, "kinf01") == (
        PASS, "7 nvidia.com/gpu allocatable (MIG layout all-1g, single strategy)")  # fmt: skip
    eight = infer_group(8, "all-1g", "single")
    assert allocatable(eight, nodes, "kinf01") == (FAIL, (
        "7 nvidia.com/gpu allocatable, expected 56 "
        "(MIG layout all-1g, single strategy: layout not applied, or the device plugin not running)"))  # fmt: skip
    mixed_node = node_as("kinf01", "nodes-h100-mig.json", 0)  # the device plugin runs mixed there
    status, msg = allocatable(one, mixed_node, "kinf01")
    assert status == FAIL and msg.endswith("the node's nvidia.com/mig.strategy label says mixed)")


def test_single_strategy_cannot_offer_a_layout_of_several_profiles() -> None:
    # gpuforge check refuses such a spec (spec rule); a spec changed after loading still gets the reason.
    with pytest.raises(SpecError, match="single needs every GPU in MIG mode with one profile"):
        infer_group(1, "all-balanced", "single", **{"all-balanced": ALL_BALANCED})
    mixed = infer_group(1, "all-balanced", "mixed", **{"all-balanced": ALL_BALANCED})
    k = mixed.kubernetes
    operator = k.gpu_operator.model_copy(update={"mig_strategy": MigStrategy.SINGLE})
    spec = mixed.model_copy(update={"kubernetes": k.model_copy(update={"gpu_operator": operator})})
    assert allocatable(spec, node_as("kinf01", "nodes-h100-mig.json", 0), "kinf01") == (FAIL, (
        "MIG layout all-balanced has 0 GPU(s) without MIG and profiles 1g.10gb, 2g.20gb, 3g.40gb: the single "
        "strategy needs every GPU in MIG mode with one profile (the device plugin refuses the node); "
        "use mig_strategy: mixed"))  # fmt: skip


def test_mig_on_some_gpus_media_profiles_and_time_slicing() -> None:
    half = infer_group(8, "two", two=[{"devices": [0, 1], "mig_devices": {"1g.10gb": 7}}])
    kinf01 = next(n for n in resolve_nodes(half) if n.name == "kinf01")
    assert cluster_k8s.expected_gpu_resources(half, kinf01) == (
        {"nvidia.com/gpu": 6, "nvidia.com/mig-1g.10gb": 14}, None)  # fmt: skip

    def media(d: dict[str, Any]) -> None:
        d["mig"]["configs"]["all-1g"] = [{"devices": "all", "mig_devices": {"1g.10gb+me": 1, "1g.10gb": 6}}]
        d["kubernetes"]["gpu_operator"]["time_slicing_replicas"] = 2

    shared = variant("k8s-gpu-operator", media)
    kinf01 = next(n for n in resolve_nodes(shared) if n.name == "kinf01")
    # "+" is "." in the resource name (k8s-device-plugin internal/rm/rm.go); replicas multiply each
    assert cluster_k8s.expected_gpu_resources(shared, kinf01) == (
        {"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 96, "nvidia.com/mig-1g.10gb.me": 16}, None)  # fmt: skip


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


def tenants(kind: str, *tenant: tuple[str, str, int]) -> Any:
    """The example spec with these (name, namespace, gpu_quota) tenants in a ``kind`` batch queue."""
    version = "v1.15.1" if kind == "volcano" else "v0.19.2"

    def change(d: dict[str, Any]) -> None:
        d["kubernetes"]["batch_queue"] = {"kind": kind, "version": version, "tenants": [
            {"name": name, "namespace": ns, "gpu_quota": quota} for name, ns, quota in tenant]}  # fmt: skip

    return variant("k8s-gpu-operator", change)


def test_a_recorded_clusterqueue_is_active() -> None:
    cq = fixture("kueue-clusterqueue-two-gpu-flavors.json")["items"][0]  # kubernetes-sigs/kueue#1726, Kueue 0.5.2
    assert cluster_k8s.queue_unusable("kueue", cq) is None  # Active True, reason Ready, as recorded
    cq["status"]["conditions"][0].update(status="False", reason="FlavorNotFound")
    assert cluster_k8s.queue_unusable("kueue", cq) == "not Active: FlavorNotFound"


def test_a_recorded_clusterqueue_guarantees_the_gpus_of_both_its_flavors() -> None:
    spec = tenants("kueue", ("cq-all-resources", "pgrunt", 12))
    queues = fixture("kueue-clusterqueue-two-gpu-flavors.json")
    assert cluster_k8s.k8s_queues(*data_for(spec, queues=queues)) == (
        PASS, "1 kueue queue(s) with the spec's GPU quotas")  # fmt: skip


def test_a_recorded_open_volcano_queue_without_deserved_gpus_guarantees_none() -> None:
    queues = fixture("volcano-queues-recorded.json")  # que02: volcano-sh/volcano#3790
    assert cluster_k8s.queue_unusable("volcano", queues["items"][0]) is None  # state Open
    spec = tenants("volcano", ("que02", "team-a", 8))
    assert cluster_k8s.k8s_queues(*data_for(spec, queues=queues)) == (
        FAIL, "que02: nvidia.com/gpu quota 0, the spec says 8")  # fmt: skip


def test_a_recorded_volcano_queue_its_controller_never_opened_admits_nothing() -> None:
    normal = fixture("volcano-queues-recorded.json")["items"][1]  # normal-queue: volcano-sh/volcano#3314
    assert "status" not in normal
    # Volcano's admission webhook refuses PodGroups unless the state is Open (checkQueueState)
    assert cluster_k8s.queue_unusable("volcano", normal) == "no state: Volcano's controller has not opened it"


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
# kubectl stand-in: logs every call; creates read their manifest from stdin into $KSTATE, and
# refuse one that contains $FAKE_REFUSE (as an admission webhook would)
[ "$1" = --kubeconfig ] && shift 2
echo "$*" >> "$KSTATE/log"
case "$1" in
  create) n=$(ls "$KSTATE" | grep -c manifest); cat > "$KSTATE/manifest$n"
          if [ -n "$FAKE_REFUSE" ] && grep -qF "$FAKE_REFUSE" "$KSTATE/manifest$n"; then
            echo 'Error from server: admission webhook denied the request' >&2; exit 1
          fi ;;
  wait) [ "$FAKE_PHASE" = Succeeded ] ;;
  get) case "$*" in
         *workloads*|*podgroups*) printf '%s' "$FAKE_ADMITTED" ;;
         *pod/*) printf '%s' "$FAKE_PHASE" ;;
       esac ;;
  logs) printf '[Vector addition of 50000 elements]\nCopy input data to the CUDA device\nTest PASSED\nDone\n' ;;
  delete) ;;
esac
"""


def run_probe(tmp_path: Path, spec: Any, phase: str, admitted: str, refuse: str = "") -> tuple[str, Path]:
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
           "FAKE_PHASE": phase, "FAKE_ADMITTED": admitted, "FAKE_REFUSE": refuse}  # fmt: skip
    cp = subprocess.run(["sh", "-c", k8s_probe.probe_query(spec)], env=env, capture_output=True, text=True,
                        timeout=60)  # fmt: skip
    return cp.stdout, state


def test_the_probe_runs_the_cuda_sample_and_a_job_per_tenant_and_cleans_up(tmp_path: Path) -> None:
    spec = variant("k8s-gpu-operator", lambda d: None)
    out, state = run_probe(tmp_path, spec, "Succeeded", "True")
    probe = k8s_probe.parse_probe(out)
    assert probe["cuda"][0] == "Succeeded" and "Test PASSED" in probe["cuda"][1]
    assert probe["admission"] == {"team-vision": "True", "team-language": "True"}
    pod = yaml.safe_load((state / "manifest0").read_text())
    assert pod["metadata"]["name"].startswith("gpuforge-probe-") and pod["metadata"]["name"].endswith("-cuda")
    assert pod["spec"]["containers"][0]["image"] == k8s_probe.CUDA_SAMPLE_IMAGE
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
    assert k8s_probe.k8s_cuda_sample(data, plane)[0] == PASS
    assert k8s_probe.k8s_queue_admission(data, plane)[0] == PASS


def test_a_failed_sample_and_a_job_never_admitted_fail(tmp_path: Path) -> None:
    spec = variant("k8s-gpu-operator", lambda d: None)
    out, _ = run_probe(tmp_path, spec, "Failed", "False")
    data, plane = data_for(spec)
    data.kube_probe = k8s_probe.parse_probe(out)
    status, msg = k8s_probe.k8s_cuda_sample(data, plane)
    assert status == FAIL and msg.startswith("the CUDA sample pod ended Failed within 300 s")
    status, msg = k8s_probe.k8s_queue_admission(data, plane)
    assert status == FAIL and "team-vision: False" in msg and "team-language: False" in msg
    data.kube_probe = None
    assert k8s_probe.k8s_cuda_sample(data, plane)[0] == BLOCKED


def volcano_spec() -> Any:
    return variant(
        "k8s-gpu-operator", lambda d: d["kubernetes"]["batch_queue"].update(kind="volcano", version="v1.15.1")
    )


def test_the_volcano_probe_makes_a_podgroup_per_tenant_queue_and_cleans_up(tmp_path: Path) -> None:
    spec = volcano_spec()
    out, state = run_probe(tmp_path, spec, "Succeeded", "Inqueue")
    probe = k8s_probe.parse_probe(out)
    assert probe["admission"] == {"team-vision": "Inqueue", "team-language": "Inqueue"}
    name = yaml.safe_load((state / "manifest0").read_text())["metadata"]["name"].replace("-cuda", "-admit")
    groups = [yaml.safe_load((state / f"manifest{i}").read_text()) for i in (1, 2)]
    assert groups == [
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/managed-by": "gpuforge"}},
            "spec": {"queue": queue, "minMember": 1, "minResources": {"cpu": "10m"}},
        }
        for ns, queue in (("team-vision", "vision"), ("team-language", "language"))
    ]
    rendered = [d["metadata"]["name"] for d in k8s_render.volcano_manifests(spec) if d["kind"] == "Queue"]
    assert [g["spec"]["queue"] for g in groups] == rendered  # the Queues gpuforge applies
    log = (state / "log").read_text()
    assert f"get podgroups.scheduling.volcano.sh -n team-vision {name} -o jsonpath={{.status.phase}}" in log
    assert f"delete podgroups.scheduling.volcano.sh -n team-vision {name} --ignore-not-found --wait=false" in log
    assert log.count("delete podgroups.scheduling.volcano.sh -n team-") == 2 and "delete job" not in log

    data, plane = data_for(spec)
    data.kube_probe = probe
    assert k8s_probe.k8s_queue_admission(data, plane) == (
        PASS, "a job was admitted in each of 2 volcano tenant queue(s)")  # fmt: skip


def test_a_podgroup_left_pending_or_refused_is_not_admitted(tmp_path: Path) -> None:
    spec = volcano_spec()
    # language's Queue refuses PodGroups (Volcano's webhook: only an Open queue takes them)
    out, _ = run_probe(tmp_path, spec, "Succeeded", "Pending", refuse='queue: "language"')
    data, plane = data_for(spec)
    data.kube_probe = k8s_probe.parse_probe(out)
    assert data.kube_probe["admission"] == {"team-vision": "Pending", "team-language": "create-failed"}
    assert k8s_probe.k8s_queue_admission(data, plane) == (
        FAIL, "not admitted within 60 s: team-vision: Pending; team-language: create-failed")  # fmt: skip
    # Running (its pods run) is past admission too; nothing read is not
    data.kube_probe = {"cuda": ("Succeeded", []), "admission": {"team-vision": "Running", "team-language": "none"}}
    assert k8s_probe.k8s_queue_admission(data, plane) == (FAIL, "not admitted within 60 s: team-language: none")


def test_no_admission_probe_without_tenants_in_a_queue() -> None:
    none = variant("k8s-gpu-operator", lambda d: d["kubernetes"].update(batch_queue={"kind": "none"}))
    assert k8s_probe.k8s_queue_admission(*data_for(none)) == (SKIP, "no Kueue or Volcano tenants in the spec")
    assert "for t in ; do" in k8s_probe.probe_query(none)  # the CUDA sample only
