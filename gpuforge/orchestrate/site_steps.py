"""Apply and plan with the site's Ansible steps between gpuforge's layers.

Without ``site.ansible`` a run is one pyinfra run over every layer (unchanged). With it, the
layer order is cut after every layer a step follows; each segment is one pyinfra run and the
steps that follow it run next, on the nodes they target that have not failed so far. A node that
fails (a layer or a step) is left out of everything after it, like a failing layer in one run;
the other nodes converge. In a plan, pyinfra runs dry and the steps run in check mode with diff.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuforge.deploy.converge import Step, StepKind
from gpuforge.deploy.run import ApplyResult, HostResult, run_site
from gpuforge.deploy.runstate import PlannedOp, RunState
from gpuforge.extensions.ansible_inventory import vagrant_hosts
from gpuforge.extensions.ansible_run import HostOutcome, StepOutcome, run_step
from gpuforge.progress import Milestone
from gpuforge.spec import Spec, resolve_nodes
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.extensions import AnsibleStep
from gpuforge.spec.nodes import targeted
from gpuforge.spec.roles import LAYER_ORDER

Segment = tuple[tuple[str, ...], list[AnsibleStep]]


def segments(steps: list[AnsibleStep]) -> list[Segment]:
    """The layer order cut after each layer some step follows: (layers, the steps after them)."""
    out: list[Segment] = []
    current: list[str] = []
    for layer in LAYER_ORDER:
        current.append(layer)
        after = [s for s in steps if s.after == layer]
        if after:
            out.append((tuple(current), after))
            current = []
    if current:
        out.append((tuple(current), []))
    return out


def step_nodes(spec: Spec, step: AnsibleStep) -> set[str]:
    """Nodes a step targets (roles or node groups; every node when it names none)."""
    return {n.name for n in resolve_nodes(spec) if targeted(n, step.targets)}


def _merge(into: dict[str, HostResult], part: ApplyResult) -> None:
    for name, h in part.hosts.items():
        have = into.setdefault(name, HostResult(name))
        have.connected = have.connected and h.connected
        have.changed.extend(h.changed)
        have.unchanged += h.unchanged
        have.error = have.error or h.error
        have.notes = list(dict.fromkeys([*have.notes, *h.notes]))


def step_summary(outcome: StepOutcome, check: bool) -> Milestone:
    """One line per finished step: nodes ok (how many changed or would change) and failed."""
    failed = sorted(n for n, o in outcome.hosts.items() if o.failed)
    changed = sum(1 for o in outcome.hosts.values() if o.changed and not o.failed)
    verb = "would change" if check else "changed"
    text = (
        f"ansible {outcome.step}: {len(outcome.hosts) - len(failed)} node(s) ok ({changed} {verb}), "
        f"{len(failed)} failed"
    )
    return Milestone(text + (f" ({', '.join(failed)})" if failed else ""))


def _record_step(results: dict[str, HostResult], run: RunState, outcome: StepOutcome) -> None:
    label = f"ansible {outcome.step}"
    for name, o in outcome.hosts.items():
        h = results.setdefault(name, HostResult(name))
        if run.dry_run:
            steps = [Step(StepKind.ANSIBLE, f"{label}: {task}") for task in o.changed]
            diffs = {f"{label} #{i}": d for i, d in enumerate(o.diffs)}
            run.record_planned(name, PlannedOp(label, steps, diffs))
        else:
            h.changed.extend(f"{label}: {task}" for task in o.changed)
            h.unchanged += o.ok - len(o.changed)
        if o.failed:
            h.error = h.error or f"{label}: {o.failed}"


def run_with_site_steps(
    cluster: Cluster,
    names: list[str] | None,
    run: RunState,
    on_event: Callable[[str], None] | None = None,
) -> ApplyResult:
    """Layers in segments with the site's Ansible steps between them (see the module docstring)."""
    say = on_event or (lambda _m: None)
    spec, spec_dir = cluster.spec, cluster.folder
    try:
        vagrant = vagrant_hosts(spec, str(spec_dir))
    except (RuntimeError, OSError) as exc:  # the layers still run; the steps fail on vagrant nodes
        say(f"site steps: {exc}")
        vagrant = {}
    alive = names if names is not None else [n.name for n in resolve_nodes(spec)]
    results: dict[str, HostResult] = {n: HostResult(n) for n in alive}
    chosen = run.layers  # --tags/--skip-tags: only these layers (None: all)
    for layers, steps in segments(list(spec.site.ansible)):
        if not alive:
            break
        walk = tuple(layer for layer in layers if chosen is None or layer in chosen)
        if walk:
            run.layers = walk
            try:
                _merge(results, run_site(cluster, alive, run, on_event))
            finally:
                run.layers = chosen
        alive = [n for n in alive if results[n].ok]
        for step in steps:
            targets = [n for n in alive if n in step_nodes(spec, step)]
            if not targets:
                continue
            say(f"ansible {step.name} ({'check mode' if run.dry_run else 'apply'}) on {len(targets)} node(s)")
            try:
                outcome = run_step(spec, spec_dir, step, targets, check=run.dry_run, vagrant=vagrant, on_event=say)
            except LookupError as exc:  # a vagrant machine that is not up
                outcome = StepOutcome(step.name, {n: HostOutcome(failed=str(exc)) for n in targets})
            _record_step(results, run, outcome)
            say(step_summary(outcome, run.dry_run))
            alive = [n for n in alive if results[n].ok]
    return ApplyResult(results)
