"""How a spec change is rolled out, from the update policies of the fields it touches.

``plan_rollout`` is pure: old spec + new spec in, a RolloutPlan out. ``live`` changes are
applied to every node at once; ``rolling`` changes go to the nodes they concern in
batches of ``rollout.batch_size``, each batch drained first and resumed after it
validates; ``rebuild`` changes are refused on a running cluster unless forced.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuforge.orchestrate import k8s_upgrade, storage_changes
from gpuforge.spec import Role, Spec, resolve_nodes
from gpuforge.spec.diff import FieldChange, diff_specs
from gpuforge.spec.policy import UpdatePolicy


@dataclass
class RolloutPlan:
    """What a change needs: refused fields, rolling fields with their nodes, batches."""

    refused: list[FieldChange] = field(default_factory=list)
    rolling: list[FieldChange] = field(default_factory=list)
    live: list[FieldChange] = field(default_factory=list)
    rolling_nodes: list[str] = field(default_factory=list)
    batches: list[list[str]] = field(default_factory=list)
    unknown_change: bool = False
    """True when what changed is unknown (unreadable record, forced): every node rolls."""
    reasons: dict[str, list[str]] = field(default_factory=dict)
    """Each rolling node's rolling fields (paths); empty when ``unknown_change``."""

    @property
    def needs_rolling(self) -> bool:
        return bool(self.batches)


def _group_nodes(spec: Spec, group: str) -> list[str]:
    return [n.name for n in resolve_nodes(spec) if n.group == group]


def nodes_concerned(spec: Spec, change: FieldChange, old: Spec | None = None) -> list[str]:
    """Nodes a rolling change touches (by the field's place in the spec; a storage change: the
    drainable nodes whose own mount units change from ``old``, :mod:`.storage_changes`)."""
    nodes = resolve_nodes(spec)
    loc = change.loc
    if old is not None and storage_changes.is_storage(change):
        changed = set(storage_changes.changed_nodes(old, spec, change))
        return [n.name for n in nodes if n.name in changed and (n.has(Role.COMPUTE) or n.has(Role.K8S_WORKER))]
    if len(loc) > 1 and loc[0] == "node_groups":
        return _group_nodes(spec, str(loc[1]))
    if len(loc) > 2 and loc[:2] == ("mig", "configs"):
        return [n.name for n in nodes if n.mig_config == loc[2]]
    if tuple(loc) == k8s_upgrade.VERSION_FIELD:  # kubeadm upgrades every node, control planes first
        return [n.name for n in nodes if n.roles & {Role.K8S_CONTROL_PLANE, Role.K8S_WORKER}]
    if loc[:1] in (("mig",), ("container_runtime",)) or loc[:2] in (("versions", "driver"), ("versions", "pyxis")):
        return [n.name for n in nodes if n.hardware.gpu is not None] or [n.name for n in nodes if n.has(Role.COMPUTE)]
    return [n.name for n in nodes if n.has(Role.COMPUTE) or n.has(Role.K8S_WORKER)]


def batch_nodes(spec: Spec, nodes: list[str]) -> list[list[str]]:
    """``nodes`` in rollout batches: Kubernetes control planes alone and first, the rest
    ``rollout.batch_size`` at a time (:func:`gpuforge.orchestrate.k8s_upgrade.batches`)."""
    return k8s_upgrade.batches(spec, nodes, spec.rollout.batch_size)


def plan_rollout(old: Spec | None, new: Spec) -> RolloutPlan:
    """Classify the changes from ``old`` (the last applied spec) to ``new``; a Kubernetes version
    that is no single step from ``old``'s is refused (:class:`gpuforge.spec.SpecError`)."""
    plan = RolloutPlan()
    if old is None:
        return plan  # first bring-up: everything at once
    k8s_upgrade.check_version_steps([old], new)
    for change in diff_specs(old, new):
        if change.policy is UpdatePolicy.REBUILD:
            plan.refused.append(change)
        elif change.policy is UpdatePolicy.ROLLING:
            plan.rolling.append(change)
        else:
            plan.live.append(change)
    existing = {n.name for n in resolve_nodes(old)}
    for change in plan.rolling:
        for name in nodes_concerned(new, change, old):
            # A node the old spec did not have has nothing running to drain: it just joins.
            if name in existing and change.path not in plan.reasons.setdefault(name, []):
                plan.reasons[name].append(change.path)
    # A storage change that drains no node (no drainable node's mount unit changes) is live.
    quiet = [c for c in plan.rolling if storage_changes.is_storage(c) and not _rolls(plan, c.path)]
    plan.live.extend(quiet)
    plan.rolling = [c for c in plan.rolling if c not in quiet]
    order = [n.name for n in resolve_nodes(new)]
    plan.rolling_nodes = sorted(plan.reasons, key=order.index)
    plan.batches = batch_nodes(new, plan.rolling_nodes)
    return plan


def _rolls(plan: RolloutPlan, path: str) -> bool:
    return any(path in why for why in plan.reasons.values())


def settle(plan: RolloutPlan, new: Spec, path: str, done: set[str]) -> None:
    """``done`` nodes already carry field ``path``'s new value (read on them): it no longer rolls
    them; a node with no other rolling field leaves the roll (its deploy is then live: nothing of
    that change is left to do on it), and once no node rolls for ``path`` it is a live change.
    An unknown change (every node rolls) is left as it is."""
    if plan.unknown_change:
        return
    for name in done:
        if path in plan.reasons.get(name, []):
            plan.reasons[name] = [p for p in plan.reasons[name] if p != path]
            if not plan.reasons[name]:
                del plan.reasons[name]
    plan.rolling_nodes = [n for n in plan.rolling_nodes if n in plan.reasons]
    plan.batches = batch_nodes(new, plan.rolling_nodes)
    if not _rolls(plan, path):
        plan.live.extend(c for c in plan.rolling if c.path == path)
        plan.rolling = [c for c in plan.rolling if c.path != path]


def roll_every_node(new: Spec) -> RolloutPlan:
    """The safe plan when the last applied spec is unknown: every node drained and applied in batches."""
    names = [n.name for n in resolve_nodes(new)]
    return RolloutPlan(rolling_nodes=names, batches=batch_nodes(new, names), unknown_change=True)


def plan_by_node(parts: list[tuple[Spec | None, list[str]]], new: Spec) -> RolloutPlan:
    """The rollout when nodes last converged to different specs: ``parts`` pairs an old spec with
    the nodes that run it. Each pair is planned alone and each rolls only its own nodes; refused
    and changed fields are combined (a field refused for any node is refused)."""
    plan = RolloutPlan()
    rolling: set[str] = set()
    for old, nodes in parts:
        if not nodes:
            continue
        part = plan_rollout(old, new)
        for mine, theirs in ((plan.refused, part.refused), (plan.rolling, part.rolling), (plan.live, part.live)):
            mine.extend(c for c in theirs if c not in mine)
        rolling.update(n for n in part.rolling_nodes if n in nodes)
        plan.reasons.update((n, part.reasons[n]) for n in part.rolling_nodes if n in nodes)
    plan.rolling_nodes = [n.name for n in resolve_nodes(new) if n.name in rolling]
    plan.batches = batch_nodes(new, plan.rolling_nodes)
    return plan
