"""Kubernetes upgrades and rolling changes as kubeadm's upgrade says (``gpuforge.spec.k8s_day2``
'kubeadm-upgrade'): one minor at a time, the control planes first and one at a time, then the workers.

Invariants:
- ``versions.kubernetes`` moves forward by at most one minor from what the cluster runs (the last
  applied spec, and the spec nodes of an interrupted rollout converged to): a skip or a downgrade is
  refused before anything is touched, naming the field (exit 2).
- Control planes roll alone, the first control plane first (it runs ``kubeadm upgrade apply``), then
  the others in the spec's order (``kubeadm upgrade node``); workers follow, ``rollout.batch_size`` at a
  time. One control plane at a time also keeps etcd's quorum during any rolling change.
- A worker never gets a newer kubelet than the API server: while the version changes, a worker waits
  (left alone, reported) unless every control plane has converged or rolls in the same run before it.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuforge.spec import Spec, SpecError, SpecIssue, resolve_nodes
from gpuforge.spec.diff import FieldChange
from gpuforge.spec.k8s_day2 import END_OF_LIFE, version_tuple
from gpuforge.spec.model import Role

VERSION_FIELD = ("versions", "kubernetes")


def version_issues(old: Spec | None, new: Spec) -> list[SpecIssue]:
    """Why the move from ``old``'s Kubernetes version to ``new``'s cannot be made ([] when it can)."""
    if old is None or old.kubernetes is None or new.kubernetes is None:
        return []
    was, want = old.versions.kubernetes, new.versions.kubernetes
    a, b = version_tuple(was), version_tuple(want)
    if b < a:
        why = f"{was} -> {want} is a downgrade: kubeadm upgrades only (restore {was}, or rebuild the cluster)"
        return [SpecIssue(VERSION_FIELD, why)]
    if b[0] != a[0] or b[1] > a[1] + 1:
        step = f"{a[0]}.{a[1] + 1}"
        eol = END_OF_LIFE.get(a[1] + 1)
        note = f" (end of life {eol})" if eol else ""
        why = (
            f"{was} -> {want} skips a minor version, which kubeadm does not support: upgrade to the newest "
            f"{step}.x{note} first, apply, then to {b[0]}.{b[1]}"
        )
        return [SpecIssue(VERSION_FIELD, why)]
    return []


def check_version_steps(olds: Iterable[Spec | None], new: Spec) -> None:
    """:class:`SpecError` (exit 2) when ``new``'s version is not one step from every spec the nodes run."""
    issues: list[SpecIssue] = []
    for old in olds:
        issues += [i for i in version_issues(old, new) if i not in issues]
    if issues:
        raise SpecError(issues)


def control_planes(spec: Spec) -> list[str]:
    """The control planes in the spec's order: the first one (``kubeadm upgrade apply``) first."""
    return [n.name for n in resolve_nodes(spec) if n.has(Role.K8S_CONTROL_PLANE)]


def batches(spec: Spec, nodes: list[str], size: int) -> list[list[str]]:
    """``nodes`` in batches: each control plane alone (spec order), then the rest ``size`` at a time."""
    planes = [n for n in control_planes(spec) if n in nodes] if spec.kubernetes is not None else []
    rest = [n for n in nodes if n not in planes]
    return [[p] for p in planes] + [rest[i : i + size] for i in range(0, len(rest), size)]


def version_changes(changes: Iterable[FieldChange]) -> bool:
    return any(tuple(c.loc) == VERSION_FIELD for c in changes)


def waiting_for_control_planes(
    spec: Spec, rolling_fields: Iterable[FieldChange], to_roll: list[str], converged: Iterable[str]
) -> dict[str, str]:
    """Workers of ``to_roll`` that must wait: the Kubernetes version changes and a control plane has
    neither converged nor rolls in this run (``--limit`` left it out), so the API server may be older."""
    if spec.kubernetes is None or not version_changes(rolling_fields):
        return {}
    done = set(converged)
    behind = [p for p in control_planes(spec) if p not in done and p not in to_roll]
    if not behind:
        return {}
    why = (
        f"Kubernetes {spec.versions.kubernetes}: the control planes upgrade first and {', '.join(behind)} has not "
        "(kubelets may not be newer than the API server): apply without --limit, or include the control planes"
    )
    planes = set(control_planes(spec))
    return {n: why for n in to_roll if n not in planes}
