"""Cross-field rules of the ``acceptance`` section (run with the spec's other rules, all problems at once)."""

from __future__ import annotations

from collections.abc import Iterator

from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.model import Role, Scheduler, Spec
from gpuforge.spec.nodes import resolve_nodes, select_nodes


def acceptance_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Spares name a Slurm partition and compute nodes outside it (Kubernetes: a node group of workers and
    workers outside it, with the labels that make a member), once each; the fabric pair test needs a group
    with a fabric."""
    acc = spec.acceptance
    if acc.steps.fabric.enabled and not any(g.fabric for g in spec.node_groups):
        yield SpecIssue(
            ("acceptance", "steps", "fabric", "enabled"),
            "the fabric pair test needs a node group with a fabric (node_groups[].fabric): none has one",
        )
    if not acc.spares:
        return
    if spec.cluster.scheduler is Scheduler.KUBERNETES:
        yield from _kube_spare_issues(spec)
        return
    if spec.slurm is None:
        yield SpecIssue(("acceptance", "spares"), "spares move nodes between Slurm partitions: a Slurm cluster only")
        return
    for i, pool in enumerate(acc.spares):
        for name in ("labels", "spare_taints"):
            if getattr(pool, name):
                yield SpecIssue(("acceptance", "spares", i, name), "Kubernetes only: a Slurm spare moves by partition")
    yield from _spare_issues(spec)


def _kube_spare_issues(spec: Spec) -> Iterator[SpecIssue]:
    """On Kubernetes a pool names a node group of workers; its spares are workers outside it; labels say who
    is a member (a spare gets them when it moves in)."""
    groups = {g.name: g for g in spec.node_groups}
    workers = {n.name for n in resolve_nodes(spec) if n.has(Role.K8S_WORKER)}
    seen: dict[str, int] = {}
    for i, pool in enumerate(spec.acceptance.spares):
        loc = ("acceptance", "spares", i)
        group = groups.get(pool.partition)
        if group is None or Role.K8S_WORKER not in group.roles:
            yield SpecIssue((*loc, "partition"), f"no node group {pool.partition!r} of k8s-worker nodes in node_groups")
            continue
        if not pool.labels:
            yield SpecIssue((*loc, "labels"), "a Kubernetes pool needs the labels that make a node a member of "
                            f"{pool.partition} (a spare gets them when it moves in)")  # fmt: skip
        members = set(group.hostnames)
        for name in pool.hostnames:
            if name not in workers:
                yield SpecIssue((*loc, "nodes"), f"{name} is not a k8s-worker node of the spec")
            elif name in members:
                yield SpecIssue((*loc, "nodes"), f"{name} is in node group {pool.partition} already: not a spare")
            elif name in seen:
                yield SpecIssue((*loc, "nodes"), f"{name} is a spare of acceptance.spares[{seen[name]}] already")
            seen.setdefault(name, i)
        if pool.size > len(members):
            yield SpecIssue((*loc, "size"), f"{pool.partition} has {len(members)} node(s), fewer than size {pool.size}")


def _spare_issues(spec: Spec) -> Iterator[SpecIssue]:
    assert spec.slurm is not None
    partitions = {p.name: p for p in spec.slurm.partitions}
    compute = {n.name for n in resolve_nodes(spec) if n.has(Role.COMPUTE)}
    seen: dict[str, int] = {}
    for i, pool in enumerate(spec.acceptance.spares):
        loc = ("acceptance", "spares", i)
        names = pool.hostnames
        if pool.partition not in partitions:
            yield SpecIssue((*loc, "partition"), f"no partition {pool.partition!r} in slurm.partitions")
            continue
        members = set(select_nodes(spec, partitions[pool.partition].nodes))
        for name in names:
            if name not in compute:
                yield SpecIssue((*loc, "nodes"), f"{name} is not a compute node of the spec")
            elif name in members:
                yield SpecIssue((*loc, "nodes"), f"{name} is already in partition {pool.partition}: not a spare")
            elif name in seen:
                yield SpecIssue((*loc, "nodes"), f"{name} is a spare of acceptance.spares[{seen[name]}] already")
            seen.setdefault(name, i)
        if pool.size > len(members):
            yield SpecIssue(
                (*loc, "size"), f"{pool.partition} has {len(members)} node(s) in the spec, fewer than size {pool.size}"
            )
