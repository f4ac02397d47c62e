"""Cluster-wide Kubernetes checks, judged per node from one kubectl query on the first control plane.

``kube_query`` is one SSH round trip of read-only ``kubectl get ... -o json`` sections (nodes,
the GPU Operator's pods, the tenants' queues); ``apply_kube_query`` parses it into ``ClusterData``.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from gpuforge.spec import Role, Spec
from gpuforge.spec.model import ManagedBy, MigStrategy
from gpuforge.spec.nodes import Node, nodes_with
from gpuforge.spec.types import k8s_name
from gpuforge.validator.cluster import ClusterData, cluster_check, sections
from gpuforge.validator.node.base import BLOCKED, CRITICAL, FAIL, PASS, SKIP, Outcome

# --------------------------------------------------------------------------- gates


def gate_k8s_node(spec: Spec, node: Node) -> str | None:
    if spec.kubernetes is None:
        return "not a Kubernetes cluster"
    return None if node.roles & {Role.K8S_CONTROL_PLANE, Role.K8S_WORKER} else "not a Kubernetes node"


def gate_k8s_gpu_worker(spec: Spec, node: Node) -> str | None:
    reason = gate_k8s_node(spec, node)
    if reason:
        return reason
    if not node.has(Role.K8S_WORKER):
        return "not a Kubernetes worker"
    return None if node.hardware.gpu else "the spec declares no GPUs for this node"


def gate_k8s_first_control_plane(spec: Spec, node: Node) -> str | None:
    if spec.kubernetes is None:
        return "not a Kubernetes cluster"
    planes = nodes_with(spec, Role.K8S_CONTROL_PLANE)
    return None if planes and planes[0].name == node.name else "checked on the first control-plane node"


# --------------------------------------------------------------------------- queries and checks


#: The tenants' queue objects, by batch-queue kind (the CRDs' plural.group names).
QUEUE_RESOURCES = {"kueue": "clusterqueues.kueue.x-k8s.io", "volcano": "queues.scheduling.volcano.sh"}


def kube_query(namespace: str, queue_kind: str = "none") -> str:
    """kubectl on a control-plane node: nodes, the GPU Operator's pods and the queues, as JSON."""
    k = "KUBECONFIG=${KUBECONFIG:-/etc/kubernetes/admin.conf} kubectl"
    ns = shlex.quote(namespace)
    query = (
        "if ! command -v kubectl >/dev/null 2>&1; then echo '__missing=kubectl'; exit 0; fi; "
        f"echo '__section=nodes'; {k} get nodes -o json 2>&1; echo \"__rc=$?\"; "
        f"echo '__section=pods'; {k} get pods -n {ns} -o json 2>&1; echo \"__rc=$?\""
    )
    if queue_kind in QUEUE_RESOURCES:
        query += f"; echo '__section=queues'; {k} get {QUEUE_RESOURCES[queue_kind]} -o json 2>&1; echo \"__rc=$?\""
    return query


def _json_section(lines: list[str]) -> tuple[Any, str | None]:
    body = [line for line in lines if not line.startswith("__rc=")]
    rc = next((line.split("=", 1)[1] for line in lines if line.startswith("__rc=")), None)
    if rc != "0":
        return None, " ".join(body).strip()[:200] or f"exit {rc}"
    try:
        return json.loads("\n".join(body)), None
    except ValueError as e:
        return None, f"invalid JSON: {e}"


def apply_kube_query(data: ClusterData, text: str) -> None:
    """Fill ``data`` from :func:`kube_query` output."""
    if "__missing=kubectl" in text:
        data.kube_error = f"kubectl not installed on {data.kube_node}"
        return
    parts = sections(text)
    nodes, err = _json_section(parts.get("nodes", []))
    if err:
        data.kube_error = f"kubectl get nodes on {data.kube_node}: {err}"
        return
    data.kube_nodes = {i["metadata"]["name"]: i for i in (nodes or {}).get("items", [])}
    pods, err = _json_section(parts.get("pods", []))
    data.kube_pods = None if err else list((pods or {}).get("items", []))
    if "queues" in parts:
        queues, err = _json_section(parts["queues"])
        data.kube_queues = None if err else list((queues or {}).get("items", []))
        data.kube_queues_error = err


@cluster_check("scheduler.k8s_node_ready", "scheduler", CRITICAL, "The Kubernetes node is Ready", gate=gate_k8s_node)
def k8s_ready(data: ClusterData, node: Node) -> Outcome:
    if data.kube_error:
        return BLOCKED, f"cannot ask the API server: {data.kube_error}"
    item = data.kube_nodes.get(node.name)
    if item is None:
        return FAIL, f"kubectl get nodes does not list {node.name} (not joined)"
    conds = {c.get("type"): c for c in item.get("status", {}).get("conditions", [])}
    ready = conds.get("Ready", {})
    if ready.get("status") == "True":
        return PASS, f"{node.name} is Ready"
    return FAIL, f"{node.name} is not Ready: {ready.get('reason') or ready.get('message') or 'no Ready condition'}"


def expected_allocatable(spec: Spec, node: Node) -> int:
    """nvidia.com/gpu a worker should offer (time-slicing multiplies it)."""
    count = node.hardware.gpu_count
    if spec.kubernetes is None:
        return count
    replicas = spec.kubernetes.gpu_operator.time_slicing_replicas
    return count * replicas if replicas > 1 else count


@cluster_check(
    "scheduler.k8s_gpu_allocatable",
    "scheduler",
    CRITICAL,
    "The worker offers its GPUs as allocatable nvidia.com/gpu",
    depends_on=("scheduler.k8s_node_ready",),
    gate=gate_k8s_gpu_worker,
)
def k8s_allocatable(data: ClusterData, node: Node) -> Outcome:
    item = data.kube_nodes.get(node.name) or {}
    raw = item.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu", "0")
    try:
        have = int(str(raw))
    except ValueError:
        have = 0
    k8s = data.spec.kubernetes
    mig = k8s is not None and k8s.gpu_operator.mig_strategy is not MigStrategy.NONE and node.mig_config
    want = expected_allocatable(data.spec, node)
    if mig:
        return (PASS, f"{have} nvidia.com/gpu allocatable (MIG)") if have >= 1 else (FAIL, "no MIG devices allocatable")
    if have == want:
        return PASS, f"{have} nvidia.com/gpu allocatable"
    return FAIL, f"{have} nvidia.com/gpu allocatable, expected {want} (device plugin not running?)"


#: The GPU Operator's components in the order each needs the one before (driver -> toolkit ->
#: device plugin -> dcgm-exporter), by the name prefix of their pods (the operator's DaemonSets:
#: nvidia-driver-daemonset, nvidia-container-toolkit-daemonset, nvidia-device-plugin-daemonset,
#: nvidia-dcgm-exporter; GPU Operator docs, "Verify the installation": kubectl get pods -n gpu-operator).
OPERATOR_CHAIN = (
    ("driver", "nvidia-driver-daemonset"),
    ("container toolkit", "nvidia-container-toolkit"),
    ("device plugin", "nvidia-device-plugin"),
    ("dcgm-exporter", "nvidia-dcgm-exporter"),
)


def expected_chain(spec: Spec) -> list[tuple[str, str]]:
    """The chain's components the operator runs for this spec (host-managed ones are not its)."""
    k = spec.kubernetes
    if k is None:
        return []
    op = k.gpu_operator
    skip = set()
    if op.driver is ManagedBy.HOST:
        skip.add("driver")
    if op.toolkit is ManagedBy.HOST:
        skip.add("container toolkit")
    if not op.dcgm_exporter:
        skip.add("dcgm-exporter")
    return [c for c in OPERATOR_CHAIN if c[0] not in skip]


def _pod_state(pod: dict[str, Any]) -> tuple[str, bool]:
    """(phase, ready): ready when Succeeded, or Running with every container ready."""
    status = pod.get("status", {})
    phase = str(status.get("phase"))
    if phase == "Succeeded":
        return phase, True
    containers = status.get("containerStatuses") or [{}]
    waiting = [
        str(c.get("state", {}).get("waiting", {}).get("reason"))
        for c in containers
        if c.get("state", {}).get("waiting")
    ]
    ready = phase == "Running" and all(c.get("ready") for c in containers)
    return (f"{phase}, {waiting[0]}" if waiting else phase), ready


@cluster_check(
    "scheduler.k8s_operator_pods",
    "scheduler",
    CRITICAL,
    "GPU Operator pods are ready, in order: driver, toolkit, device plugin, dcgm-exporter",
    depends_on=("scheduler.k8s_node_ready",),
    gate=gate_k8s_first_control_plane,
)
def k8s_operator_pods(data: ClusterData, node: Node) -> Outcome:
    ns = data.spec.kubernetes.gpu_operator.namespace if data.spec.kubernetes else "gpu-operator"
    if data.kube_pods is None:
        return FAIL, f"cannot list pods in namespace {ns}"
    if not data.kube_pods:
        return FAIL, f"no pods in namespace {ns} (GPU Operator not installed)"
    states = {str(p.get("metadata", {}).get("name", "?")): _pod_state(p) for p in data.kube_pods}
    for component, prefix in expected_chain(data.spec):
        mine = {name: st for name, st in states.items() if name.startswith(prefix)}
        if not mine:
            return FAIL, f"no {component} pods ({prefix}-*) in {ns}: the components after it wait for it"
        bad = [f"{name} ({phase})" for name, (phase, ready) in mine.items() if not ready]
        if bad:
            return FAIL, f"{component} not ready: {', '.join(sorted(bad)[:3])}; the components after it wait for it"
    others = [f"{name} ({phase})" for name, (phase, ready) in states.items() if not ready]
    if others:
        return FAIL, f"{len(others)} GPU Operator pod(s) not ready: {', '.join(sorted(others)[:5])}"
    return PASS, f"{len(states)} GPU Operator pods ready in {ns} ({', '.join(c for c, _ in expected_chain(data.spec))})"


def _quantity(value: Any) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def queue_quota(kind: str, queue: dict[str, Any]) -> int | None:
    """The nvidia.com/gpu a queue guarantees: Kueue's nominalQuota, Volcano's deserved."""
    spec = queue.get("spec", {})
    if kind == "volcano":
        return _quantity(spec.get("deserved", {}).get("nvidia.com/gpu", 0))
    for group in spec.get("resourceGroups", []):
        for flavor in group.get("flavors", []):
            for res in flavor.get("resources", []):
                if res.get("name") == "nvidia.com/gpu":
                    return _quantity(res.get("nominalQuota"))
    return None


def queue_unusable(kind: str, queue: dict[str, Any]) -> str | None:
    """Why a queue does not admit work, from its status (None: it does)."""
    status = queue.get("status", {})
    if kind == "volcano":
        state = status.get("state")
        return None if state in (None, "Open") else f"state {state}"
    active = {c.get("type"): c for c in status.get("conditions", [])}.get("Active")
    if active is None or active.get("status") == "True":
        return None
    return f"not Active: {active.get('reason') or active.get('message')}"


@cluster_check(
    "scheduler.k8s_queues",
    "scheduler",
    CRITICAL,
    "Every tenant's queue exists with the spec's GPU quota and admits work",
    depends_on=("scheduler.k8s_node_ready",),
    gate=gate_k8s_first_control_plane,
)
def k8s_queues(data: ClusterData, node: Node) -> Outcome:
    k = data.spec.kubernetes
    if k is None or k.batch_queue.kind == "none" or not k.batch_queue.tenants:
        return SKIP, "no tenants with a batch queue in the spec"
    kind = k.batch_queue.kind
    if data.kube_queues is None:
        return FAIL, f"cannot list the {QUEUE_RESOURCES[kind]}: {data.kube_queues_error or 'not read'}"
    have = {str(q.get("metadata", {}).get("name")): q for q in data.kube_queues}
    problems = []
    for t in k.batch_queue.tenants:
        name = k8s_name(t.name)
        q = have.get(name)
        if q is None:
            problems.append(f"{name}: missing")
            continue
        quota = queue_quota(kind, q)
        if quota != t.gpu_quota:
            problems.append(f"{name}: nvidia.com/gpu quota {quota}, the spec says {t.gpu_quota}")
        why = queue_unusable(kind, q)
        if why:
            problems.append(f"{name}: {why}")
    if problems:
        return FAIL, "; ".join(problems)
    return PASS, f"{len(k.batch_queue.tenants)} {kind} queue(s) with the spec's GPU quotas"


# --------------------------------------------------------------------------- active probe

#: NVIDIA's CUDA sample the GPU Operator docs run to verify an install (vectorAdd prints "Test PASSED").
CUDA_SAMPLE_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
PROBE_WAIT_S = 300
ADMISSION_WAIT_S = 60
PROBE_CHECKS = ("scheduler.k8s_cuda_sample", "scheduler.k8s_queue_admission")


def probe_query(spec: Spec) -> str:
    """One script on the first control plane: a CUDA sample pod asking for one GPU, and (Kueue) a
    suspended one-pod Job per tenant's LocalQueue; waits with bounds, reports, and deletes what it
    made whatever happens. Every spec value is quoted; names are gpuforge's own."""
    k = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
    kueue = spec.kubernetes is not None and spec.kubernetes.batch_queue.kind == "kueue"
    tenants = spec.kubernetes.batch_queue.tenants if spec.kubernetes is not None and kueue else []
    namespaces = " ".join(shlex.quote(t.namespace) for t in tenants)
    pod = f"""apiVersion: v1
kind: Pod
metadata: {{name: "$id-cuda", namespace: default, labels: {{app.kubernetes.io/managed-by: gpuforge}}}}
spec:
  restartPolicy: Never
  tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
  containers:
  - name: cuda-vectoradd
    image: {CUDA_SAMPLE_IMAGE}
    resources: {{limits: {{nvidia.com/gpu: 1}}}}"""
    job = """apiVersion: batch/v1
kind: Job
metadata: {name: "$id-admit", namespace: "$ns", labels: {kueue.x-k8s.io/queue-name: default}}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: probe, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: 10m}}}"""
    wait_pod = (
        f"then $K wait -n default --for=jsonpath='{{.status.phase}}'=Succeeded \"pod/$id-cuda\" "
        f"--timeout={PROBE_WAIT_S}s >/dev/null 2>&1"
    )
    # the Admitted condition of the Workload Kueue made for this job (its owner)
    admitted = (
        "{range .items[?(@.metadata.ownerReferences[0].name=='$id-admit')]}"
        "{.status.conditions[?(@.type=='Admitted')].status}{end}"
    )
    cleanup = (
        'cleanup() { $K delete pod -n default "$id-cuda" --ignore-not-found --wait=false >/dev/null 2>&1; '
        f'for ns in {namespaces}; do $K delete job -n "$ns" "$id-admit" --ignore-not-found --wait=false '
        "--cascade=foreground >/dev/null 2>&1; done; }"
    )
    return "\n".join([
        f"K='{k}'; id=gpuforge-probe-$(date +%s)-$$",
        cleanup,
        "trap cleanup EXIT",
        "echo __section=cuda",
        f"if $K create -f - >/dev/null <<EOF\n{pod}\nEOF",
        wait_pod,
        "echo \"__phase=$($K get -n default \"pod/$id-cuda\" -o jsonpath='{.status.phase}' 2>&1)\"",
        "$K logs -n default \"$id-cuda\" --tail=5 2>&1",
        "else echo __phase=NotCreated; fi",
        "echo __section=admission",
        f"for ns in {namespaces}; do",
        f"  if $K create -f - >/dev/null 2>&1 <<EOF\n{job}\nEOF",
        f"  then i=0; a=; while [ $i -lt {ADMISSION_WAIT_S} ]; do",
        f"      a=$($K get workloads.kueue.x-k8s.io -n \"$ns\" -o jsonpath=\"{admitted}\" 2>/dev/null)",
        "      [ \"$a\" = True ] && break; sleep 2; i=$((i + 2)); done",
        "    echo \"__tenant=$ns ${a:-none}\"",
        "  else echo \"__tenant=$ns create-failed\"; fi",
        "done",
    ])  # fmt: skip


def parse_probe(text: str) -> dict[str, Any]:
    """{"cuda": (phase, last log lines), "admission": {namespace: "True" | "False" | "none" | ...}}."""
    parts = sections(text)
    cuda = parts.get("cuda", [])
    phase = next((line.split("=", 1)[1] for line in cuda if line.startswith("__phase=")), "not run")
    logs = [line for line in cuda if not line.startswith("__")]
    admission = {}
    for line in parts.get("admission", []):
        if line.startswith("__tenant="):
            ns, _, state = line.split("=", 1)[1].partition(" ")
            admission[ns] = state.strip()
    return {"cuda": (phase, logs[-5:]), "admission": admission}


def gate_probe(spec: Spec, node: Node) -> str | None:
    reason = gate_k8s_first_control_plane(spec, node)
    if reason:
        return reason
    workers = [n for n in nodes_with(spec, Role.K8S_WORKER) if n.hardware.gpu]
    return None if workers else "no GPU workers in the spec"


@cluster_check(
    "scheduler.k8s_cuda_sample",
    "scheduler",
    CRITICAL,
    "A CUDA sample pod asking for one GPU runs to completion (vectorAdd: Test PASSED)",
    depends_on=("scheduler.k8s_operator_pods",),
    gate=gate_probe,
)
def k8s_cuda_sample(data: ClusterData, node: Node) -> Outcome:
    if data.kube_probe is None:
        return BLOCKED, "the probe did not run on the control plane"
    phase, logs = data.kube_probe["cuda"]
    tail = " | ".join(logs)[-200:]
    if phase == "Succeeded" and any("Test PASSED" in line for line in logs):
        return PASS, f"{CUDA_SAMPLE_IMAGE.rsplit('/', 1)[-1]} ran to completion: Test PASSED"
    return FAIL, f"the CUDA sample pod ended {phase or 'without a phase'} within {PROBE_WAIT_S} s: {tail or 'no log'}"


@cluster_check(
    "scheduler.k8s_queue_admission",
    "scheduler",
    CRITICAL,
    "A small job in every tenant's queue is admitted (Kueue)",
    depends_on=("scheduler.k8s_queues",),
    gate=gate_k8s_first_control_plane,
)
def k8s_queue_admission(data: ClusterData, node: Node) -> Outcome:
    k = data.spec.kubernetes
    if k is None or k.batch_queue.kind != "kueue" or not k.batch_queue.tenants:
        return SKIP, "no Kueue tenants in the spec (Volcano admission is not probed)"
    if data.kube_probe is None:
        return BLOCKED, "the probe did not run on the control plane"
    got = data.kube_probe["admission"]
    bad = [f"{t.namespace}: {got.get(t.namespace, 'not probed')}" for t in k.batch_queue.tenants
           if got.get(t.namespace) != "True"]  # fmt: skip
    if bad:
        return FAIL, f"not admitted within {ADMISSION_WAIT_S} s: {'; '.join(bad)}"
    return PASS, f"a job was admitted in each of {len(k.batch_queue.tenants)} tenant queue(s)"
