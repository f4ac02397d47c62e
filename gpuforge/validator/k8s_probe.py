"""The Kubernetes cluster probe: one bounded script on the first control plane that runs NVIDIA's CUDA
sample on a GPU and an admission probe in every tenant's queue, then deletes what it made whatever
happens; and the two checks judged from what it printed.

Invariants: every spec value in the script is quoted (names are gpuforge's own or Kubernetes
names); the script's waits are bounded (``PROBE_WAIT_S``, ``ADMISSION_WAIT_S`` per tenant) and the
runner's timeout covers them; the checks depend on the read-only cluster checks of
:mod:`gpuforge.validator.cluster_k8s`.
"""

from __future__ import annotations

import shlex
from typing import Any

from gpuforge.spec import Role, Spec
from gpuforge.spec.k8s_upstream import CUDA_SAMPLE_IMAGE, PAUSE_IMAGE
from gpuforge.spec.nodes import Node, nodes_with
from gpuforge.spec.types import k8s_name
from gpuforge.validator.cluster import ClusterData, cluster_check, sections
from gpuforge.validator.cluster_k8s import gate_k8s_first_control_plane
from gpuforge.validator.node.base import BLOCKED, CRITICAL, FAIL, PASS, SKIP, Outcome

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


#: The CUDA sample pod, named by the script's probe id.
CUDA_POD = f"""apiVersion: v1
kind: Pod
metadata: {{name: "$id-cuda", namespace: default, labels: {{app.kubernetes.io/managed-by: gpuforge}}}}
spec:
  restartPolicy: Never
  tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
  containers:
  - name: cuda-vectoradd
    image: {CUDA_SAMPLE_IMAGE}
    resources: {{limits: {{nvidia.com/gpu: 1}}}}"""


def _admission_probe(kind: str) -> tuple[str, str, str, str]:
    """(manifest, read of its state, the loop's exit test, delete option) of one tenant's probe."""
    if kind == "volcano":
        manifest = """apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: "$id-admit", namespace: "$ns", labels: {app.kubernetes.io/managed-by: gpuforge}}
spec: {queue: "$q", minMember: 1, minResources: {cpu: 10m}}"""
        read = '$K get podgroups.scheduling.volcano.sh -n "$ns" "$id-admit" -o jsonpath=\'{.status.phase}\''
        return manifest, read, '[ -n "$a" ] && [ "$a" != Pending ] && break', ""
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
    return manifest, read, '[ "$a" = True ] && break', " --cascade=foreground"


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
    wait_pod = (
        f"then $K wait -n default --for=jsonpath='{{.status.phase}}'=Succeeded \"pod/$id-cuda\" "
        f"--timeout={PROBE_WAIT_S}s >/dev/null 2>&1"
    )
    manifest, read, done, cascade = _admission_probe(kind)
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
        f"if $K create -f - >/dev/null <<EOF\n{CUDA_POD}\nEOF",
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
