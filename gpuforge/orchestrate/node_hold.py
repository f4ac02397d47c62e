"""The cluster's scheduler, as a rollout sees it: who holds which nodes, drain, resume.

Slurm's commands run on the first controller, Kubernetes' on the first control plane (with its
admin kubeconfig), over :func:`gpuforge.orchestrate.remote.run`. A spec without a scheduler node
has nothing to drain: every function is then a no-op. Errors come back as text, never raised.
"""

from __future__ import annotations

from gpuforge.orchestrate import k8s_drain, remote, slurm_drain
from gpuforge.orchestrate.slurm_drain import DRAIN_TAG, NodeHold
from gpuforge.spec import Role, Spec, nodes_with
from gpuforge.spec.cluster import Cluster

#: Seconds a state read or a resume may take on the controller.
QUICK_TIMEOUT = 120


def _scheduler_node(spec: Spec) -> str | None:
    role = Role.K8S_CONTROL_PLANE if spec.kubernetes is not None else Role.CONTROLLER
    if spec.kubernetes is None and spec.slurm is None:
        return None
    nodes = nodes_with(spec, role)
    return nodes[0].name if nodes else None


def _run(cluster: Cluster, command: str, timeout: float) -> tuple[str | None, str]:
    """(error text or None, stdout) of ``command`` on the scheduler node."""
    node = _scheduler_node(cluster.spec)
    if node is None:
        return None, ""
    cp = remote.run(cluster, node, command, timeout=timeout)
    if cp.returncode != 0:
        return (cp.stderr.strip()[-500:] or f"exit status {cp.returncode}") + f" (on {node})", cp.stdout
    return None, cp.stdout


def read_holds(cluster: Cluster, nodes: list[str]) -> tuple[dict[str, NodeHold], str | None]:
    """Each node's hold (drained or cordoned, and why), in one command; (holds, error text)."""
    spec = cluster.spec
    if not nodes or _scheduler_node(spec) is None:
        return {}, None
    if spec.kubernetes is not None:
        error, out = _run(cluster, k8s_drain.state_command(), QUICK_TIMEOUT)
        states = k8s_drain.parse_states(out)
        holds = {
            n: NodeHold(n, cordoned, DRAIN_TAG if ours else "cordoned (unschedulable)")
            for n, (cordoned, ours) in states.items()
            if n in nodes
        }
        return holds, error
    error, out = _run(cluster, slurm_drain.state_command(nodes), QUICK_TIMEOUT)
    return parse_known(slurm_drain.parse_states(out), nodes), error


def parse_known(holds: dict[str, NodeHold], nodes: list[str]) -> dict[str, NodeHold]:
    """``holds`` of ``nodes`` only; a node the scheduler does not list yet is in service."""
    return {n: holds.get(n, NodeHold(n, held=False)) for n in nodes}


def drain(cluster: Cluster, ours: list[str], included: list[str]) -> str | None:
    """Drain ``ours`` with gpuforge's mark and wait for the jobs (Slurm) or evict the pods
    (Kubernetes, PodDisruptionBudgets respected) of ``ours`` + ``included``; ``included`` (held by an
    operator) keep their state and reason. The error text, or None."""
    timeout = cluster.spec.rollout.drain_timeout
    if cluster.spec.kubernetes is not None:
        # drain_command marks and cordons only nodes that are schedulable: an operator's cordon stays theirs.
        command = k8s_drain.drain_command([*ours, *included], timeout)
    else:
        command = slurm_drain.drain_command(ours, included, timeout)
    error, _ = _run(cluster, command, timeout + 60)
    return error


def resume(cluster: Cluster, ours: list[str]) -> str | None:
    """Give back the nodes of ``ours`` that still carry gpuforge's mark; the error text, or None."""
    k8s = cluster.spec.kubernetes is not None
    command = k8s_drain.resume_command(ours) if k8s else slurm_drain.resume_command(ours)
    error, _ = _run(cluster, command, QUICK_TIMEOUT)
    return error
