"""``gpuforge plan``: what apply would do on each host, before it does it.

Runs the same deploys as apply in dry-run mode (facts are read, nothing is changed),
and lists spec fields changed since the last successful apply with their update policy.
Secrets are never shown: secret files appear as "secret content (not shown)", and a file that
holds credentials from the spec (alertmanager.yml's webhook URLs) is diffed through its
``redact``; every diff, step and error also passes :func:`redact_url_credentials`, so neither the
text nor the JSON plan shows a password in a URL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from rich.console import Console
from rich.syntax import Syntax
from rich.text import Text

from gpuforge.deploy.image_mode import ImageCompare
from gpuforge.deploy.runstate import PlannedOp, RunState
from gpuforge.orchestrate import k8s_remove
from gpuforge.orchestrate.applied_record import RecordUnreadable, last_applied
from gpuforge.orchestrate.apply import ApplyPreview, run_deploys
from gpuforge.orchestrate.k8s_remove import RemovalStep
from gpuforge.orchestrate.k8s_upgrade import check_version_steps
from gpuforge.orchestrate.slurm_build import planned_builds
from gpuforge.spec import hostlist
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.diff import FieldChange, diff_specs
from gpuforge.spec.layer_tags import LayerSelection
from gpuforge.spec.redact import redact_url_credentials


@dataclass
class PlanResult:
    hosts: dict[str, list[PlannedOp]]
    errors: dict[str, str]
    fields: list[FieldChange] = field(default_factory=list)
    record_problem: str | None = None
    """Why the last-applied record could not be read (apply would refuse); None when it could."""
    layers: LayerSelection | None = None
    """``--tags``/``--skip-tags``: the plan covers these layers only (None: all of them)."""
    removals: list[RemovalStep] = field(default_factory=list)
    """Kubernetes nodes the spec dropped: the commands that take them out of the cluster, in order."""
    removal_problem: str | None = None
    """Why apply refuses that removal without --force (etcd's quorum); None when it does not."""
    images: dict[str, str] = field(default_factory=dict)
    """Per node booted from a gpuforge image: "image matches spec" or the layers that differ."""
    builds: list[str] = field(default_factory=list)
    """gpuforge's Slurm builds (``slurm.source: build``): cached, or built by apply before any node."""

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def pending(self) -> bool:
        """Whether apply would change anything: a command or a file on a node, or a changed field
        to record (steps that only report, such as notes, change nothing)."""
        steps = (s for ops in self.hosts.values() for op in ops for s in op.steps)
        return (
            bool(self.fields)
            or bool(self.removals)
            or any(s.command is not None or s.upload is not None for s in steps)
        )

    def exit_code(self, detailed: bool) -> int:
        """Terraform's ``-detailed-exitcode``: 0 no change, 1 error, 2 changes pending; without
        ``detailed``: 0 or 1."""
        if not self.ok:
            return 1
        return 2 if detailed and self.pending else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "tags": None if self.layers is None else self.layers.tags,
            "fields": [{"path": f.path, "policy": f.policy.value} for f in self.fields],
            "record_problem": self.record_problem,
            "removals": [
                {"node": r.node, "on": r.where, "summary": r.summary, "command": r.command} for r in self.removals
            ],
            "removal_problem": self.removal_problem,
            "builds": self.builds,
            "hosts": {
                name: {
                    "error": self.errors.get(name),
                    "image": self.images.get(name),
                    "operations": [
                        {"layer": op.layer, "steps": [s.as_dict() for s in op.steps], "diffs": op.diffs} for op in ops
                    ],
                }
                for name, ops in sorted(self.hosts.items())
            },
        }

    def print(self, console: Console) -> None:
        if self.record_problem:
            console.print(f"[bold red]warning:[/] {self.record_problem}", highlight=False)
        if self.layers is not None:
            console.print(
                f"[bold]Only {self.layers.describe()}[/] (--tags/--skip-tags); apply with them leaves nodes with a "
                "rolling change pending alone",
                highlight=False,
            )
        if self.builds:
            console.print("[bold]Slurm built from SchedMD's tarball[/]")
            for line in self.builds:
                console.print(f"  {line}", markup=False, highlight=False)
        if self.removals:
            console.print("[bold]Nodes leaving the cluster (dropped from the spec), in order[/]")
            for r in self.removals:
                console.print(f"  {r.node}: on {r.where}: {r.summary}", markup=False, highlight=False)
        if self.removal_problem:
            console.print(f"[bold red]refused:[/] {self.removal_problem}", highlight=False)
        if self.fields:
            console.print("[bold]Spec fields changed since the last apply[/]")
            for f in self.fields:
                console.print(f"  {f.path}: [cyan]{f.policy.value}[/]")
        for name in sorted(self.hosts):
            ops = self.hosts[name]
            steps = [s for op in ops for s in op.steps]
            if name in self.images:
                console.print(f"{name}: {self.images[name]}", markup=False, highlight=False)
            if name in self.errors:
                # the error quotes node text (an SSH banner): printed as text, never as markup
                console.print(Text(f"{name}: {self.errors[name]}", style="red"), highlight=False)
                continue
            if not steps:
                console.print(f"[green]{name}: no change[/]")
                continue
            console.print(f"[yellow]{name}: {len(steps)} step(s)[/]")
            for op in ops:
                for s in op.steps:
                    console.print(f"  [{op.layer}] {s.summary}", markup=False, highlight=False)
                for diff in op.diffs.values():
                    if diff:
                        console.print(Syntax(diff, "diff", theme="ansi_dark"))


def shown_ops(ops: list[PlannedOp]) -> list[PlannedOp]:
    """``ops`` as a plan shows them: each file's diff through the file's own ``redact`` (which hides
    the old copy's credentials as well as the new one's), then every diff, step summary and command
    through :func:`redact_url_credentials`."""
    shown: list[PlannedOp] = []
    for op in ops:
        files = {s.upload.path: s.upload for s in op.steps if s.upload is not None}
        diffs = {}
        for path, diff in op.diffs.items():
            own = files[path].redact if path in files else None
            diffs[path] = redact_url_credentials(own(diff) if own is not None else diff)
        steps = [
            replace(
                s,
                summary=redact_url_credentials(s.summary),
                command=None if s.command is None else redact_url_credentials(s.command),
            )
            for s in op.steps
        ]
        shown.append(PlannedOp(op.layer, steps, diffs))
    return shown


def plan(
    cluster: Cluster,
    limit: str | None = None,
    layers: LayerSelection | None = None,
    on_event: Callable[[str], None] | None = None,
) -> PlanResult:
    """What apply would do on the selected nodes (``layers``: these only), read from them, changing nothing."""
    spec = cluster.spec
    try:
        old, problem = last_applied(cluster), None
    except RecordUnreadable as exc:
        old, problem = None, str(exc)
    check_version_steps([old], spec)  # a Kubernetes minor skipped or a downgrade: exit 2, as apply
    compared = ImageCompare()  # reads each node's image record in its base layer's read (deploy.image_mode)
    run = RunState(dry_run=True, image=compared)
    if layers is not None:
        run.layers, run.site_steps = layers.layers, layers.site_steps
    result = run_deploys(cluster, limit=limit, on_event=on_event, run=run)
    hosts = {name: shown_ops(run.planned.get(name, [])) for name in result.hosts}
    images = {h: st.line() for h, st in compared.statuses(spec).items() if st.record.present or st.record.problem}
    errors = {name: redact_url_credentials(h.error) for name, h in result.hosts.items() if h.error}
    builds = planned_builds(cluster)
    if problem is not None:
        return PlanResult(hosts, errors, [], record_problem=problem, layers=layers, images=images, builds=builds)
    leaving: list[RemovalStep] = []
    if old is not None:
        leaving = [step for name in k8s_remove.removed(old, spec) for step in k8s_remove.removal_steps(old, name)]
    issue = k8s_remove.quorum_issue(old, spec) if old is not None and leaving else None
    return PlanResult(
        hosts, errors, diff_specs(old, spec) if old else [], layers=layers, removals=leaving,
        removal_problem=issue.message if issue else None, images=images, builds=builds,
    )  # fmt: skip


#: Node groups a confirmation lists one per line before it says "and N more".
SUMMARY_LINES = 20


def confirmation_summary(preview: ApplyPreview, planned: PlanResult) -> list[str]:
    """What ``apply`` shows before it asks: nodes with the steps they would run (grouped when the
    same), unreachable ones, changed fields, the rolling change and what ``--tags`` leaves alone."""
    changing: dict[tuple[int, tuple[str, ...]], list[str]] = {}
    for name in preview.nodes:
        steps = [(op.layer, s) for op in planned.hosts.get(name, []) for s in op.steps]
        acting = [(layer, s) for layer, s in steps if s.command is not None or s.upload is not None]
        if name not in planned.errors and acting and name not in preview.held_back:
            layers = tuple(dict.fromkeys(layer for layer, _ in acting))
            changing.setdefault((len(acting), layers), []).append(name)
    count = sum(len(v) for v in changing.values())
    lines = [f"Plan: {count} of {len(preview.nodes)} node(s) to change" + _only(preview)]
    groups = sorted(changing.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    for (how_many, layers), names in groups[:SUMMARY_LINES]:
        each = " each" if len(names) > 1 else ""
        lines.append(f"  {hostlist.compress(names)}: {how_many} step(s){each} ({', '.join(layers)})")
    if len(groups) > SUMMARY_LINES:
        more = sum(len(v) for _, v in groups[SUMMARY_LINES:])
        lines.append(f"  ... and {more} more node(s): gpuforge plan lists them")
    for name, why in sorted(planned.errors.items()):
        lines.append(f"  {name}: {why}")
    if planned.fields:
        lines.append("Spec fields changed since the last apply: " + ", ".join(
            f"{f.path} ({f.policy.value})" for f in planned.fields))  # fmt: skip
    return lines + _rolling_and_held(preview)


def preview_summary(preview: ApplyPreview) -> list[str]:
    """What ``apply --yes`` shows before it starts, from what apply knows without reading a node
    (a second read of every node's facts would double the run): the nodes, the rolling change and
    what ``--tags`` leaves alone; ``gpuforge plan`` shows the steps."""
    lines = [f"Applying to {len(preview.nodes)} node(s): {hostlist.compress(preview.nodes)}" + _only(preview)]
    return lines + _rolling_and_held(preview)


def _rolling_and_held(preview: ApplyPreview) -> list[str]:
    """The rolling change apply will make and the nodes ``--tags`` leaves alone, with why."""
    lines = []
    if preview.to_roll:
        size = preview.spec.rollout.batch_size
        fields = ", ".join(preview.rolling_fields) or "nodes an interrupted rollout left drained"
        lines.append(
            f"Rolling change ({fields}) on {hostlist.compress(preview.to_roll)}: drained {size} at a time, "
            "changed, validated, resumed"
        )
    for why, names in _grouped(preview.held_back).items():
        lines.append(f"Left alone: {hostlist.compress(names)}: {why}")
    return lines


def _only(preview: ApplyPreview) -> str:
    return f" (only {preview.layers.describe()})" if preview.layers is not None else ""


def _grouped(reasons: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, why in reasons.items():
        out.setdefault(why, []).append(name)
    return out
