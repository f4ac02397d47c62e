"""Cluster-wide Kubernetes checks, judged per node from one kubectl query on the first control plane.

``kube_query`` is one SSH round trip of read-only ``kubectl get ... -o json`` sections (nodes,
the GPU Operator's pods, the tenants' queues); ``apply_kube_query`` parses it into ``ClusterData``.
"""

from __future__ import annotations

import json
from typing import Any

from gpuforge.spec import Role, Spec
from gpuforge.spec.model import MigStrategy
from gpuforge.spec.nodes import Node, nodes_with
from gpuforge.validator.cluster import ClusterData, cluster_check, sections
from gpuforge.validator.node.base import BLOCKED, CRITICAL, FAIL, PASS, Outcome

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


def kube_query(namespace: str) -> str:
    """kubectl on a control-plane node: nodes and GPU Operator pods as JSON."""
    k = "KUBECONFIG=${KUBECONFIG:-/etc/kubernetes/admin.conf} kubectl"
    return (
        "if ! command -v kubectl >/dev/null 2>&1; then echo '__missing=kubectl'; exit 0; fi; "
        f"echo '__section=nodes'; {k} get nodes -o json 2>&1; echo \"__rc=$?\"; "
        f"echo '__section=pods'; {k} get pods -n {namespace} -o json 2>&1; echo \"__rc=$?\""
    )


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


@cluster_check(
    "scheduler.k8s_operator_pods",
    "scheduler",
    CRITICAL,
    "GPU Operator pods are Running (or Completed)",
    depends_on=("scheduler.k8s_node_ready",),
    gate=gate_k8s_first_control_plane,
)
def k8s_operator_pods(data: ClusterData, node: Node) -> Outcome:
    ns = data.spec.kubernetes.gpu_operator.namespace if data.spec.kubernetes else "gpu-operator"
    if data.kube_pods is None:
        return FAIL, f"cannot list pods in namespace {ns}"
    if not data.kube_pods:
        return FAIL, f"no pods in namespace {ns} (GPU Operator not installed)"
    bad = []
    for pod in data.kube_pods:
        phase = pod.get("status", {}).get("phase")
        name = pod.get("metadata", {}).get("name", "?")
        if phase == "Succeeded":
            continue
        ready = all(c.get("ready") for c in pod.get("status", {}).get("containerStatuses", []) or [{}])
        if phase != "Running" or not ready:
            bad.append(f"{name} ({phase}{'' if ready else ', not ready'})")
    if bad:
        return FAIL, f"{len(bad)} GPU Operator pod(s) not ready: {', '.join(bad[:5])}"
    return PASS, f"{len(data.kube_pods)} GPU Operator pods Running or Completed in {ns}"
