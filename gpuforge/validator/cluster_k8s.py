"""Cluster-wide Kubernetes checks, judged per node from one kubectl query on the first control plane.

``kube_query`` is one SSH round trip of read-only ``kubectl get ... -o json`` sections (nodes,
the GPU Operator's pods, the tenants' queues); ``apply_kube_query`` parses it into ``ClusterData``.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from gpuforge.spec import Role, Spec
from gpuforge.spec.k8s_model import operator_dcgm_exporter
from gpuforge.spec.mig import mig_layout
from gpuforge.spec.model import ManagedBy, MigStrategy
from gpuforge.spec.nodes import Node, nodes_with
from gpuforge.spec.types import k8s_name, mig_resource
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


#: The device plugin's resources (NVIDIA/k8s-device-plugin v0.20.0, internal/rm/rm.go
#: AddDefaultResourcesToConfig): full GPUs are ``nvidia.com/gpu``; with the ``single`` MIG strategy
#: MIG devices are ``nvidia.com/gpu`` too, with ``mixed`` each profile is ``nvidia.com/mig-<profile>``
#: ("+" written "."). MIG-enabled GPUs are not offered as full GPUs under single or mixed
#: (internal/rm/device_map.go buildGPUDeviceMap), and single refuses a node whose GPUs are not all
#: MIG-enabled with one profile ("all devices on the node must be configured with the same
#: migEnabled value", "more than one MIG device type present on node").
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def expected_gpu_resources(spec: Spec, node: Node) -> tuple[dict[str, int], str | None]:
    """The nvidia.com resources a worker should offer, by name, from its GPUs, its MIG layout and the
    operator's MIG strategy (time-slicing multiplies each); or ``({}, why)`` where the strategy cannot
    offer the layout."""
    count = node.hardware.gpu_count
    k = spec.kubernetes
    replicas = k.gpu_operator.time_slicing_replicas if k is not None else 0
    factor = replicas if replicas > 1 else 1
    strategy = k.gpu_operator.mig_strategy if k is not None else MigStrategy.NONE
    if strategy is MigStrategy.NONE or not node.mig_config:
        return {GPU_RESOURCE: count * factor}, None
    layout = mig_layout(spec.mig.configs.get(node.mig_config, []), count)
    devices, full = layout.devices, layout.full_gpus
    if strategy is MigStrategy.SINGLE:
        if full or len(devices) != 1:
            return {}, (
                f"MIG layout {node.mig_config} has {full} GPU(s) without MIG and profiles "
                f"{', '.join(sorted(devices)) or 'none'}: the single strategy needs every GPU in MIG mode with one "
                "profile (the device plugin refuses the node); use mig_strategy: mixed"
            )
        return {GPU_RESOURCE: sum(devices.values()) * factor}, None
    want = {GPU_RESOURCE: full * factor}
    want.update({mig_resource(p): n * factor for p, n in sorted(devices.items())})
    return want, None


@cluster_check(
    "scheduler.k8s_gpu_allocatable",
    "scheduler",
    CRITICAL,
    "The worker offers its GPUs (or MIG devices) as allocatable nvidia.com/gpu or nvidia.com/mig-*",
    depends_on=("scheduler.k8s_node_ready",),
    gate=gate_k8s_gpu_worker,
)
def k8s_allocatable(data: ClusterData, node: Node) -> Outcome:
    item = data.kube_nodes.get(node.name) or {}
    allocatable = item.get("status", {}).get("allocatable", {})
    have = {name: _quantity(value) or 0 for name, value in allocatable.items()
            if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)}  # fmt: skip
    want, impossible = expected_gpu_resources(data.spec, node)
    if impossible:
        return FAIL, impossible
    k = data.spec.kubernetes
    strategy = k.gpu_operator.mig_strategy if k is not None else MigStrategy.NONE
    mig = strategy is not MigStrategy.NONE and bool(node.mig_config)
    problems = [f"{have.get(name, 0)} {name} allocatable, expected {n}"
                for name, n in want.items() if have.get(name, 0) != n]  # fmt: skip
    problems += [f"{n} {name} allocatable, expected none" for name, n in sorted(have.items())
                 if name not in want and n]  # fmt: skip
    if not problems:
        offered = ", ".join(f"{n} {name}" for name, n in want.items() if n or len(want) == 1)
        return PASS, f"{offered} allocatable" + (f" (MIG layout {node.mig_config}, {strategy} strategy)" if mig else "")
    if not mig:
        return FAIL, f"{'; '.join(problems)} (device plugin not running?)"
    label = item.get("metadata", {}).get("labels", {}).get("nvidia.com/mig.strategy")
    hint = f"; the node's nvidia.com/mig.strategy label says {label}" if label and label != strategy else ""
    return FAIL, (
        f"{'; '.join(problems)} (MIG layout {node.mig_config}, {strategy} strategy: layout not applied, "
        f"or the device plugin not running{hint})"
    )


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
    if not operator_dcgm_exporter(op, spec.dcgm.enabled):
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
    """The nvidia.com/gpu a queue guarantees: Volcano's deserved; Kueue's nominalQuota summed over
    every flavor of every resource group (None: no flavor names the resource)."""
    spec = queue.get("spec", {})
    if kind == "volcano":
        return _quantity(spec.get("deserved", {}).get("nvidia.com/gpu", 0))
    quotas = [
        _quantity(res.get("nominalQuota")) or 0
        for group in spec.get("resourceGroups", [])
        for flavor in group.get("flavors", [])
        for res in flavor.get("resources", [])
        if res.get("name") == "nvidia.com/gpu"
    ]
    return sum(quotas) if quotas else None


def queue_unusable(kind: str, queue: dict[str, Any]) -> str | None:
    """Why a queue does not admit work, from its status (None: it does).

    Volcano: only an ``Open`` queue takes PodGroups (its admission webhook's checkQueueState); a
    queue with no ``status.state`` has not been opened by Volcano's controller."""
    status = queue.get("status", {})
    if kind == "volcano":
        state = status.get("state")
        if state is None:
            return "no state: Volcano's controller has not opened it"
        return None if state == "Open" else f"state {state}"
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
