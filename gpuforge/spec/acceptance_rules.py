"""Cross-field rules of the ``acceptance`` section (run with the spec's other rules, all problems at once)."""

from __future__ import annotations

from collections.abc import Iterator

from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.nodes import resolve_nodes, select_nodes


def acceptance_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Spares name a Slurm partition and compute nodes outside it, once each; the fabric test stays off."""
    acc = spec.acceptance
    if acc.steps.fabric.enabled:
        yield SpecIssue(
            ("acceptance", "steps", "fabric", "enabled"),
            "the fabric pair test needs the fabric layer, which is not built yet: leave it off",
        )
    if not acc.spares:
        return
    if spec.slurm is None:
        yield SpecIssue(("acceptance", "spares"), "spares move nodes between Slurm partitions: a Slurm cluster only")
        return
    yield from _spare_issues(spec)


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
