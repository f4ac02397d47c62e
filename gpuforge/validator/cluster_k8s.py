"""Cluster-wide Kubernetes checks, judged per node from one kubectl query on the first control plane.

``kube_query`` is one SSH round trip of read-only ``kubectl get ... -o json`` sections (nodes,
the GPU Operator's pods, the tenants' queues); ``apply_kube_query`` parses it into ``ClusterData``.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from gpuforge.spec import Role, Spec
from gpuforge.spec.k8s_facts import CUDA_SAMPLE_IMAGE, PAUSE_IMAGE
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


def expected_allocatable(spec: Spec, node: Node) -> int:
    """nvidia.com/gpu a worker should offer (time-slicing multiplies it; MIG devices under single)."""
    return expected_gpu_resources(spec, node)[0].get(GPU_RESOURCE, 0)


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


# --------------------------------------------------------------------------- active probe

PROBE_WAIT_S = 300
ADMISSION_WAIT_S = 60
PROBE_CHECKS = ("scheduler.k8s_cuda_sample", "scheduler.k8s_queue_admission")

#: What the admission probe creates in each tenant's namespace, how it reads the result, and the
#: results that mean "admitted", by batch-queue kind:
#: - Kueue: a suspended one-pod Job labelled with the tenant's LocalQueue; Kueue makes a Workload for it
#:   (owned by the Job) and sets its ``Admitted`` condition to True when the ClusterQueue admits it.
#: - Volcano: a PodGroup (scheduling.volcano.sh/v1beta1: ``spec.queue``, ``minMember: 1``,
#:   ``minResources``) in the tenant's Queue. It starts ``Pending``; the scheduler's ``enqueue`` action
#:   moves it to ``Inqueue`` when the Queue has room for its ``minResources`` (the capacity plugin's
#:   jobEnqueueable), then ``Running`` once ``minMember`` pods run (volcano-sh/volcano v1.15.1,
#:   docs/design/delay-pod-creation.md, pkg/scheduler/actions/enqueue/enqueue.go; phases Pending,
#:   Running, Unknown, Inqueue in the PodGroup CRD). It has no pods, so nothing runs: leaving Pending for
#:   Inqueue is admission, as Volcano's own Job controller waits for it before it creates pods. Volcano's
#:   admission webhook refuses a PodGroup whose Queue is missing or not Open (create-failed).
ADMISSION_PROBES = {
    "kueue": ("job", ("True",)),
    "volcano": ("podgroups.scheduling.volcano.sh", ("Inqueue", "Running")),
}


def probe_query(spec: Spec) -> str:
    """One script on the first control plane: a CUDA sample pod asking for one GPU, and an admission
    probe per tenant (Kueue: a suspended one-pod Job in its LocalQueue; Volcano: a PodGroup in its
    Queue, see ``ADMISSION_PROBES``); waits with bounds, reports, and deletes what it made whatever
    happens. Every spec value is quoted; names are gpuforge's own."""
    k = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
    kind = spec.kubernetes.batch_queue.kind if spec.kubernetes is not None else "none"
    tenants = spec.kubernetes.batch_queue.tenants if spec.kubernetes is not None and kind in ADMISSION_PROBES else []
    # "namespace:queue" pairs (neither can hold a colon: both are Kubernetes names)
    pairs = " ".join(shlex.quote(f"{t.namespace}:{k8s_name(t.name)}") for t in tenants)
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
    wait_pod = (
        f"then $K wait -n default --for=jsonpath='{{.status.phase}}'=Succeeded \"pod/$id-cuda\" "
        f"--timeout={PROBE_WAIT_S}s >/dev/null 2>&1"
    )
    if kind == "volcano":
        manifest = """apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: "$id-admit", namespace: "$ns", labels: {app.kubernetes.io/managed-by: gpuforge}}
spec: {queue: "$q", minMember: 1, minResources: {cpu: 10m}}"""
        read = '$K get podgroups.scheduling.volcano.sh -n "$ns" "$id-admit" -o jsonpath=\'{.status.phase}\''
        done = '[ -n "$a" ] && [ "$a" != Pending ] && break'
        cascade = ""
    else:
        manifest = """apiVersion: batch/v1
kind: Job
metadata: {name: "$id-admit", namespace: "$ns", labels: {kueue.x-k8s.io/queue-name: default}}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: probe, image: PAUSE, resources: {requests: {cpu: 10m}}}""".replace("PAUSE", PAUSE_IMAGE)
        # the Admitted condition of the Workload Kueue made for this job (its owner)
        admitted = (
            "{range .items[?(@.metadata.ownerReferences[0].name=='$id-admit')]}"
            "{.status.conditions[?(@.type=='Admitted')].status}{end}"
        )
        read = f'$K get workloads.kueue.x-k8s.io -n "$ns" -o jsonpath="{admitted}"'
        done = '[ "$a" = True ] && break'
        cascade = " --cascade=foreground"
    resource = ADMISSION_PROBES.get(kind, ADMISSION_PROBES["kueue"])[0]
    cleanup = (
        'cleanup() { $K delete pod -n default "$id-cuda" --ignore-not-found --wait=false >/dev/null 2>&1; '
        f'for t in {pairs}; do $K delete {resource} -n "${{t%%:*}}" "$id-admit" --ignore-not-found --wait=false'
        f"{cascade} >/dev/null 2>&1; done; }}"
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
        f"for t in {pairs}; do",
        '  ns=${t%%:*}; q=${t#*:}',
        f"  if $K create -f - >/dev/null 2>&1 <<EOF\n{manifest}\nEOF",
        f"  then i=0; a=; while [ $i -lt {ADMISSION_WAIT_S} ]; do",
        f"      a=$({read} 2>/dev/null)",
        f"      {done}; sleep 2; i=$((i + 2)); done",
        "    echo \"__tenant=$ns ${a:-none}\"",
        "  else echo \"__tenant=$ns create-failed\"; fi",
        "done",
    ])  # fmt: skip


def parse_probe(text: str) -> dict[str, Any]:
    """{"cuda": (phase, last log lines), "admission": {namespace: state}}: the state is Kueue's Admitted
    status ("True", "False") or the Volcano PodGroup's phase ("Inqueue", "Pending", ...), "none" when
    nothing was read, "create-failed" when the object was refused."""
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
    "A small job in every tenant's queue is admitted (Kueue: Workload Admitted; Volcano: PodGroup Inqueue)",
    depends_on=("scheduler.k8s_queues",),
    gate=gate_k8s_first_control_plane,
)
def k8s_queue_admission(data: ClusterData, node: Node) -> Outcome:
    k = data.spec.kubernetes
    if k is None or k.batch_queue.kind not in ADMISSION_PROBES or not k.batch_queue.tenants:
        return SKIP, "no Kueue or Volcano tenants in the spec"
    if data.kube_probe is None:
        return BLOCKED, "the probe did not run on the control plane"
    admitted = ADMISSION_PROBES[k.batch_queue.kind][1]
    got = data.kube_probe["admission"]
    bad = [f"{t.namespace}: {got.get(t.namespace, 'not probed')}" for t in k.batch_queue.tenants
           if got.get(t.namespace) not in admitted]  # fmt: skip
    if bad:
        return FAIL, f"not admitted within {ADMISSION_WAIT_S} s: {'; '.join(bad)}"
    return PASS, f"a job was admitted in each of {len(k.batch_queue.tenants)} {k.batch_queue.kind} tenant queue(s)"
