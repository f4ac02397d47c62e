"""``gpuforge plan``: what apply would do on each host, before it does it.

Runs the same deploys as apply in dry-run mode (facts are read, nothing is changed),
and lists spec fields changed since the last successful apply with their update policy.
Secrets are never shown: secret files appear as "secret content (not shown)", and a file that
holds credentials from the spec (alertmanager.yml's webhook URLs) is diffed through its
``redact``; every diff, step and error also passes :func:`redact_url_credentials`, so neither the
text nor the JSON plan shows a password in a URL.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.syntax import Syntax

from gpuforge.deploy.runstate import PlannedOp, RunState
from gpuforge.orchestrate.applied_record import RecordUnreadable, last_applied
from gpuforge.orchestrate.apply import run_deploys
from gpuforge.spec import load_spec
from gpuforge.spec.diff import FieldChange, diff_specs
from gpuforge.spec.redact import redact_url_credentials


@dataclass
class PlanResult:
    hosts: dict[str, list[PlannedOp]]
    errors: dict[str, str]
    fields: list[FieldChange] = field(default_factory=list)
    record_problem: str | None = None
    """Why the last-applied record could not be read (apply would refuse); None when it could."""

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def pending(self) -> bool:
        """Whether apply would change anything: a command or a file on a node, or a changed field
        to record (steps that only report, such as notes, change nothing)."""
        steps = (s for ops in self.hosts.values() for op in ops for s in op.steps)
        return bool(self.fields) or any(s.command is not None or s.upload is not None for s in steps)

    def exit_code(self, detailed: bool) -> int:
        """Terraform's ``-detailed-exitcode``: 0 no change, 1 error, 2 changes pending; without
        ``detailed``: 0 or 1."""
        if not self.ok:
            return 1
        return 2 if detailed and self.pending else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "fields": [{"path": f.path, "policy": f.policy.value} for f in self.fields],
            "record_problem": self.record_problem,
            "hosts": {
                name: {
                    "error": self.errors.get(name),
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
        if self.fields:
            console.print("[bold]Spec fields changed since the last apply[/]")
            for f in self.fields:
                console.print(f"  {f.path}: [cyan]{f.policy.value}[/]")
        for name in sorted(self.hosts):
            ops = self.hosts[name]
            steps = [s for op in ops for s in op.steps]
            if name in self.errors:
                console.print(f"[red]{name}: {self.errors[name]}[/]")
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


def plan(spec_path: str | Path, limit: str | None = None) -> PlanResult:
    spec = load_spec(spec_path)
    run = RunState(dry_run=True)
    result = run_deploys(spec_path, limit=limit, run=run)
    hosts = {name: shown_ops(run.planned.get(name, [])) for name in result.hosts}
    errors = {name: redact_url_credentials(h.error) for name, h in result.hosts.items() if h.error}
    try:
        old = last_applied(spec_path)
    except RecordUnreadable as exc:
        return PlanResult(hosts, errors, [], record_problem=str(exc))
    return PlanResult(hosts, errors, diff_specs(old, spec) if old else [])
