"""Kubernetes nodes removed from the spec leave the cluster (``gpuforge.spec.k8s_day2``
'kubeadm-remove-node', 'etcd-operate'): drained, ``kubeadm reset``, their etcd member removed (a
control plane), deleted.

Invariants:
- A removal that would leave fewer control planes than a majority of those the cluster has (etcd's
  quorum, with every removed member stopped) is refused before anything is touched unless forced
  (:class:`gpuforge.spec.SpecError` on ``node_groups``: exit 2).
- Nodes leave one at a time; the first failure stops the apply (the node stays in the applied spec,
  so the next apply tries again), nothing after it runs.
- Cluster commands run on the new spec's first control plane with its admin kubeconfig; the reset
  runs on the removed node itself, reached with the old spec's connection settings. An unreachable
  node is not reset (reported); its etcd member is removed from the first control plane anyway.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from gpuforge.orchestrate import remote
from gpuforge.spec import Role, Spec, SpecError, SpecIssue, k8s_upstream, nodes_with, resolve_nodes
from gpuforge.spec import k8s_day2 as day2
from gpuforge.spec.cluster import Cluster

KUBECTL = f"kubectl --kubeconfig {k8s_upstream.ADMIN_CONF}"
CRICTL = f"crictl --runtime-endpoint {k8s_upstream.CRI_SOCKET_CONTAINERD}"


@dataclass(frozen=True)
class RemovalStep:
    """One command of a removal: on which node (``"first control plane"`` names it), what, why."""

    node: str
    where: str
    summary: str
    command: str


def removed(old: Spec | None, new: Spec) -> list[str]:
    """Kubernetes nodes ``old`` had that ``new`` has not (control planes last, spec order)."""
    if old is None or old.kubernetes is None or new.kubernetes is None:
        return []
    kept = {n.name for n in resolve_nodes(new)}
    gone = [n for n in resolve_nodes(old) if n.name not in kept and n.roles & {Role.K8S_WORKER, Role.K8S_CONTROL_PLANE}]
    return [n.name for n in sorted(gone, key=lambda n: n.has(Role.K8S_CONTROL_PLANE))]


def quorum_issue(old: Spec, new: Spec) -> SpecIssue | None:
    """Why removing ``old``'s control planes that ``new`` lacks would lose etcd's quorum, or None."""
    before = [n.name for n in nodes_with(old, Role.K8S_CONTROL_PLANE)]
    after = {n.name for n in nodes_with(new, Role.K8S_CONTROL_PLANE)}
    kept = [n for n in before if n in after]
    gone = [n for n in before if n not in after]
    need = len(before) // 2 + 1
    if not gone or len(kept) >= need:
        return None
    return SpecIssue(
        ("node_groups",),
        f"removing control planes {', '.join(gone)} leaves {len(kept)} of {len(before)} etcd members, fewer than "
        f"its quorum of {need}: remove fewer at a time (apply after each), or apply --force to remove them anyway",
    )


def check_removal(old: Spec | None, new: Spec, force: bool) -> None:
    """Refuse (exit 2) a removal that loses etcd's quorum, unless ``force``."""
    if old is None or force or not removed(old, new):
        return
    issue = quorum_issue(old, new)
    if issue is not None:
        raise SpecError([issue])


def etcd_member_remove_command(name: str) -> str:
    """On a control plane: remove the etcd member named ``name`` if it is still listed, with the
    etcdctl of the etcd container (etcd-image, etcd-operate: ``member list``, ``member remove <id>``)."""
    etcdctl = f'{CRICTL} exec "$c" etcdctl {day2.ETCD_CLIENT_FLAGS}'
    return (
        f'c=$({CRICTL} ps --name etcd -q | head -n 1) && [ -n "$c" ] && '
        f"id=$({etcdctl} member list | awk -F', ' -v n={shlex.quote(name)} '$3 == n {{print $1}}') && "
        f'{{ [ -z "$id" ] || {etcdctl} member remove "$id"; }}'
    )


def removal_steps(old: Spec, name: str) -> list[RemovalStep]:
    """The commands that take ``name`` (a node of ``old``) out of the cluster, in order."""
    node = next(n for n in resolve_nodes(old) if n.name == name)
    n = shlex.quote(name)
    first = "first control plane"
    drain = " ".join(day2.remove_drain_args(old.rollout.drain_timeout))
    steps = [
        RemovalStep(name, first, f"drain {name} (it leaves the cluster)",
                    f"if {KUBECTL} get node {n} >/dev/null 2>&1; then {KUBECTL} drain {n} {drain}; fi"),
        RemovalStep(name, name, f"kubeadm reset on {name}", day2.RESET_COMMAND),
    ]  # fmt: skip
    if node.has(Role.K8S_CONTROL_PLANE):
        steps.append(RemovalStep(name, first, f"remove {name}'s etcd member if still listed",
                                 etcd_member_remove_command(name)))  # fmt: skip
    steps.append(RemovalStep(name, first, f"delete node {name}", f"{KUBECTL} delete node {n} --ignore-not-found"))
    return steps


def run_removals(old: Spec, cluster: Cluster) -> dict[str, str]:
    """Remove every node ``old`` has and the ``cluster``'s spec lacks, one at a time; {node: error} of
    the first that failed (empty when all left). An unreachable node's reset is skipped, not a failure."""
    new, was = cluster.spec, cluster.with_spec(old)
    first = next(iter(nodes_with(new, Role.K8S_CONTROL_PLANE)), None)
    if first is None:
        return {}
    for name in removed(old, new):
        for step in removal_steps(old, name):
            if step.where == name:
                cp = remote.run(was, name, step.command, timeout=600)
                if cp.returncode == 255:  # ssh could not reach it: nothing to reset there
                    continue
            else:
                cp = remote.run(cluster, first.name, step.command, timeout=old.rollout.drain_timeout + 60)
            if cp.returncode != 0:
                err = cp.stderr.strip()[-500:] or f"exit status {cp.returncode}"
                return {name: f"leaving the cluster: {step.summary}: {err} (on {step.where})"}
    return {}
