"""kubectl commands of a Kubernetes campaign, run on the first control plane: the Jobs, their state,
their logs, their removal, and the node actions (cordon and taint a failed node, label a spare in).

Pure builders and parsers; every kubectl flag and Job field used is cited in :data:`SOURCES`.
Commands run with the control plane's admin kubeconfig (``gpuforge.orchestrate.k8s_drain.KUBECTL``,
the rollout's own plumbing). Invariants:

- A Job is pinned with ``spec.nodeName`` (no scheduler), never retried (``backoffLimit: 0``),
  bounded (``activeDeadlineSeconds``) and removed by Kubernetes after ``ttlSecondsAfterFinished``
  whatever happens to gpuforge; gpuforge deletes the campaign's Jobs itself once their logs are read.
- A failed node is cordoned with gpuforge's acceptance mark (annotation ``gpuforge.dev/cordoned-by:
  accept``, the reason in ``gpuforge.dev/accept-reason``) and tainted; a node cordoned by anyone
  else (no mark, or a rollout's) is left exactly as it is (:func:`cordon_command`).
- Every value reaching a command is a node, label or taint from the spec (types checked there), a
  name built here, or a reason text made safe by ``slurm_actions.reason_text``; all quoted for ``sh``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from gpuforge.acceptance import batch
from gpuforge.orchestrate.k8s_drain import KUBECTL
from gpuforge.spec import Spec
from gpuforge.spec.citation import Citation
from gpuforge.spec.nodes import Node

SOURCES: dict[str, Citation] = {
    "job": Citation(
        "Jobs (kubernetes/website content/en/docs/concepts/workloads/controllers/job.md)",
        "https://kubernetes.io/docs/concepts/workloads/controllers/job/",
        "'.spec.backoffLimit to specify the number of retries before considering a Job as failed'; 'Only a "
        "RestartPolicy equal to Never or OnFailure is allowed'; 'Once a Job reaches activeDeadlineSeconds, all of "
        "its running Pods are terminated and the Job status will become type: Failed with reason: "
        "DeadlineExceeded'; 'When you delete the job using kubectl, all the pods it created are deleted too'; "
        "status: active, succeeded, failed, startTime",
    ),
    "ttl-after-finished": Citation(
        "Automatic Cleanup for Finished Jobs (concepts/workloads/controllers/ttlafterfinished), stable since v1.23",
        "https://kubernetes.io/docs/concepts/workloads/controllers/ttlafterfinished/",
        "'clean up finished Jobs (either Complete or Failed) automatically by specifying the "
        ".spec.ttlSecondsAfterFinished field'; 'The timer starts once the status condition of the Job changes to "
        "show that the Job is either Complete or Failed'; 'it will delete it cascadingly'",
    ),
    "server-side-apply": Citation(
        "Server-Side Apply (reference/using-api/server-side-apply), stable since v1.22",
        "https://kubernetes.io/docs/reference/using-api/server-side-apply/",
        "'kubectl apply --server-side'; '--field-manager' names the manager that owns the applied fields; an "
        "object that does not exist is created",
    ),
    "kubectl-logs": Citation(
        "kubectl logs (reference/kubectl/generated/kubectl_logs)",
        "https://kubernetes.io/docs/reference/kubectl/generated/kubectl_logs",
        "'kubectl logs [-f] [-p] (POD | TYPE/NAME)'; '# Return snapshot logs from first container of a job named "
        "hello: kubectl logs job/hello'; '--tail=-1 Lines of recent log file to display'",
    ),
    "kubectl-get-jsonpath": Citation(
        "JSONPath Support (reference/kubectl/jsonpath)",
        "https://kubernetes.io/docs/reference/kubectl/jsonpath",
        "'Use the range, end operators to iterate lists'; 'Use double quotes to quote text inside JSONPath "
        "expressions'; child operator {['name\\.type']} (a dot in a key escaped); filter "
        '{.users[?(@.name=="e2e")].user.password}; kubectl get -l <selector>',
    ),
    "kubectl-delete": Citation(
        "kubectl delete (reference/kubectl/generated/kubectl_delete; kubectl pkg/cmd/delete/delete_flags.go)",
        "https://kubernetes.io/docs/reference/kubectl/generated/kubectl_delete",
        "'Delete resources by file names, stdin, resources and names, or by resources and label selector'; "
        "'--ignore-not-found Treat \"resource not found\" as a successful delete'; '--wait If true, wait for "
        "resources to be gone before returning. This waits for finalizers'; the Job's pods go with it (SOURCES['job'])",
    ),
    "kubectl-taint": Citation(
        "kubectl taint (reference/kubectl/generated/kubectl_taint)",
        "https://kubernetes.io/docs/reference/kubectl/generated/kubectl_taint",
        "'A taint consists of a key, value, and effect ... key=value:effect'; 'The value is optional. If given, it "
        "must begin with a letter or number, and may contain letters, numbers, hyphens, dots, and underscores, up "
        "to 63 characters'; 'The effect must be NoSchedule, PreferNoSchedule or NoExecute'; 'kubectl taint nodes "
        "foo dedicated:NoSchedule-' removes it; '--overwrite If true, allow taints to be overwritten'",
    ),
    "kubectl-label": Citation(
        "kubectl label (reference/kubectl/generated/kubectl_label)",
        "https://kubernetes.io/docs/reference/kubectl/generated/kubectl_label",
        "'A label key and value must begin with a letter or number, and may contain letters, numbers, hyphens, "
        "dots, and underscores, up to 63 characters each'; 'Optionally, the key can begin with a DNS subdomain "
        "prefix and a single /'; '--overwrite ... existing labels can be overwritten'",
    ),
    "taint-effects": Citation(
        "kubernetes/api core/v1 types.go TaintEffect; Taints and Tolerations "
        "(concepts/scheduling-eviction/taint-and-toleration)",
        "https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/",
        "NoSchedule: 'Do not allow new pods to schedule onto the node unless they tolerate the taint, but allow "
        "all pods submitted to Kubelet without going through the scheduler to start'; NoExecute: 'Evict any "
        "already-running pods that do not tolerate the taint'; 'An empty key with operator Exists matches all "
        "keys, values and effects which means this will tolerate everything'",
    ),
}

FIELD_MANAGER = "gpuforge-accept"
CAMPAIGN_LABEL = "gpuforge.dev/campaign"
NODE_LABEL = "gpuforge.dev/node"
#: The cordon mark of a failed acceptance (the rollout's is "rolling-change": neither undoes the other).
CORDON_MARK = "accept"
REASON_ANNOTATION = "gpuforge.dev/accept-reason"
FAILED_TAINT = "gpuforge.dev/accept-failed"
_NAME_OK = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _jp(path: str) -> str:
    """A label or annotation key as a JSONPath child (dots escaped)."""
    return path.replace(".", "\\.")


def job_name(campaign: str, node: str) -> str:
    """``gfaccept-<campaign time>-<node>``: unique per campaign and node, a DNS label (63 at most)."""
    stamp = re.sub(r"[^0-9]", "", campaign.split("-", 1)[0])[:17] or "0"
    name = f"gfaccept-{stamp}-{node.lower()}"
    if len(name) > 63 or not _NAME_OK.fullmatch(name):
        name = f"gfaccept-{stamp}-{hashlib.sha256(node.encode()).hexdigest()[:12]}"
    return name


def kube_job(spec: Spec, node: Node, campaign: str) -> dict[str, Any]:
    """The Job that tests ``node``: pinned with ``spec.nodeName``, tolerating every taint (a spare's and a
    NoExecute one), the runner and its steps in its environment (no health step: the health program is a
    Slurm node's; ``gpuforge validate`` checks a Kubernetes node's stack), its log the runner's marked lines.
    The image (``acceptance.steps.container.image``) must carry python3 and the steps' programs."""
    group = batch.JobGroup(node.name, None, node.leaf_switch, (node.name,), ((node.name, node.hardware.gpu_count),),
                           ((node.name, node.leaf_switch),))  # fmt: skip
    config = batch.runner_config(spec, group, campaign)
    config.update(steps=[s for s in config["steps"] if s["name"] != "health"], keep_dir="")
    labels = {"app.kubernetes.io/managed-by": "gpuforge", CAMPAIGN_LABEL: campaign[-63:], NODE_LABEL: node.name}
    container: dict[str, Any] = {
        "name": "accept",
        "image": spec.acceptance.steps.container.image.replace("#", "/"),
        "command": ["python3", "-c", batch.BOOT],
        "env": [
            {"name": batch.RUNNER_ENV, "value": batch._b64(batch.runner_source().encode())},
            {"name": batch.CONFIG_ENV, "value": base64.b64encode(json.dumps(config).encode()).decode()},
            {"name": "SLURMD_NODENAME", "value": node.name},
        ],
    }
    if node.hardware.gpu_count:
        container["resources"] = {"limits": {"nvidia.com/gpu": node.hardware.gpu_count}}
    acc = spec.acceptance
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(campaign, node.name), "namespace": acc.kubernetes.namespace, "labels": labels},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": batch.time_limit_minutes(spec, group) * 60,
                 "ttlSecondsAfterFinished": acc.kubernetes.ttl_seconds_after_finished,
                 "template": {"metadata": {"labels": labels},
                              "spec": {"nodeName": node.name, "restartPolicy": "Never",
                                       "tolerations": [{"operator": "Exists"}], "containers": [container]}}},
    }  # fmt: skip


# --------------------------------------------------------------------------- jobs


def submit_command(jobs: list[dict[str, Any]]) -> str:
    """Server-side apply of every Job at once (one ``List``, written to a private temporary folder):
    ``job.batch/<name>`` per Job created, kubectl's errors after them."""
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs})
    assert "GFEOF" not in doc
    return "\n".join([
        "d=$(mktemp -d) || exit 1", "trap 'rm -rf \"$d\"' EXIT", "cat >\"$d/jobs.json\" <<'GFEOF'", doc, "GFEOF",
        f"{KUBECTL} apply --server-side --field-manager={FIELD_MANAGER} -f \"$d/jobs.json\" -o name 2>&1",
    ])  # fmt: skip


def parse_submitted(text: str) -> set[str]:
    """The Job names kubectl applied."""
    return {line.strip().split("/", 1)[1] for line in text.splitlines() if line.strip().startswith("job.batch/")}


def _selector(spec: Spec, campaign: str) -> str:
    ns = shlex.quote(spec.acceptance.kubernetes.namespace)
    return f"-n {ns} -l {shlex.quote(f'{CAMPAIGN_LABEL}={campaign[-63:]}')}"


def state_command(spec: Spec, campaign: str) -> str:
    """The campaign's Jobs (``GFJOB name|node|active|succeeded|failed|Type=Status;...``) and pods
    (``GFPOD node|phase|waiting reason``), one round trip."""
    node = "{.metadata.labels." + _jp(NODE_LABEL) + "}"
    jobs = ('{range .items[*]}{"GFJOB "}{.metadata.name}{"|"}' + node + '{"|"}{.status.active}{"|"}'
            '{.status.succeeded}{"|"}{.status.failed}{"|"}{range .status.conditions[*]}{.type}{"="}{.status}'
            '{";"}{end}{"\\n"}{end}')  # fmt: skip
    pods = ('{range .items[*]}{"GFPOD "}' + node + '{"|"}{.status.phase}{"|"}'
            '{.status.containerStatuses[0].state.waiting.reason}{"\\n"}{end}')  # fmt: skip
    sel = _selector(spec, campaign)
    return (f"{KUBECTL} get jobs {sel} -o jsonpath={shlex.quote(jobs)} 2>&1; "
            f"{KUBECTL} get pods {sel} -o jsonpath={shlex.quote(pods)} 2>&1")  # fmt: skip


@dataclass(frozen=True)
class KubeJob:
    name: str
    node: str
    active: int
    succeeded: int
    failed: int
    conditions: dict[str, str] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return any(self.conditions.get(c) == "True" for c in ("Complete", "Failed"))

    @property
    def state(self) -> str:
        for c in ("Complete", "Failed"):
            if self.conditions.get(c) == "True":
                return c.upper()
        return "ACTIVE" if self.active else "PENDING"


def _int(text: str) -> int:
    return int(text) if text.strip().isdigit() else 0


def parse_state(text: str) -> tuple[dict[str, KubeJob], dict[str, tuple[str, str]]]:
    """(Jobs by node, pods by node: (phase, waiting reason))."""
    jobs: dict[str, KubeJob] = {}
    pods: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("GFJOB "):
            parts = (line[6:].split("|") + [""] * 6)[:6]
            conds = dict(c.split("=", 1) for c in parts[5].split(";") if "=" in c)
            jobs[parts[1]] = KubeJob(parts[0], parts[1], _int(parts[2]), _int(parts[3]), _int(parts[4]), conds)
        elif line.startswith("GFPOD "):
            node, phase, reason = [*line[6:].split("|"), "", ""][:3]
            pods[node] = (phase, reason)
    return jobs, pods


def logs_command(spec: Spec, jobs: dict[str, str]) -> str:
    """Each Job's log (``jobs``: node -> Job name) between ``GFLOG <node> begin`` and ``GFLOG <node> end rc=``,
    every line of it prefixed ``| `` (a pod cannot print a marker that ends its log or opens another node's)."""
    ns = shlex.quote(spec.acceptance.kubernetes.namespace)
    parts = []
    for node, name in jobs.items():
        n = shlex.quote(node)
        job = shlex.quote("job/" + name)
        parts.append(
            f'echo GFLOG {n} begin; f=$(mktemp); {KUBECTL} logs -n {ns} {job} --tail=-1 >"$f" 2>&1; rc=$?; '
            f'sed \'s/^/| /\' "$f"; rm -f "$f"; echo GFLOG {n} end rc=$rc'
        )
    return "\n".join(parts) or "true"


def parse_logs(text: str) -> dict[str, tuple[str, int]]:
    """Per node: (its log, kubectl's exit status); only ``| ``-prefixed lines are the pod's."""
    out: dict[str, tuple[str, int]] = {}
    node: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        m = re.fullmatch(r"GFLOG (\S+) (begin|end rc=(\d+))", line)
        if m and m[2] == "begin":
            node, lines = m[1], []
        elif m and node == m[1]:
            out[m[1]] = ("\n".join(lines), int(m[3]))
            node = None
        elif node is not None and line.startswith("| "):
            lines.append(line[2:])
    return out


def delete_command(spec: Spec, campaign: str, names: list[str] | None = None) -> str:
    """Delete the campaign's Jobs (their pods go with them): all, or those of ``names``."""
    ns = shlex.quote(spec.acceptance.kubernetes.namespace)
    if names is not None:
        if not names:
            return "true"
        return (
            f"{KUBECTL} delete jobs -n {ns} {' '.join(shlex.quote(n) for n in names)} --ignore-not-found --wait=false"
        )
    return f"{KUBECTL} delete jobs {_selector(spec, campaign)} --ignore-not-found --wait=false"
