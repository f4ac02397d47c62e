"""``gpuforge plan``: what apply would do on each host, before it does it.

Runs the same deploys as apply in dry-run mode (facts are read, nothing is changed),
and lists spec fields changed since the last successful apply with their update policy.
Secrets are never shown: secret files appear as "secret content (not shown)".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.syntax import Syntax

from gpuforge.apply import run_deploys
from gpuforge.operations import layer as layer_ops
from gpuforge.secrets import state_root
from gpuforge.spec import Spec, load_spec, parse_spec
from gpuforge.spec.diff import FieldChange, diff_specs


def applied_spec_path(spec_path: str | Path) -> Path:
    """Where the last successfully applied version of a spec file is kept.

    Keyed by the spec file (not the cluster name), so renaming the cluster in the file is
    seen as a change of that cluster, not as a new one.
    """
    key = hashlib.sha256(str(Path(spec_path).resolve()).encode()).hexdigest()[:16]
    return state_root() / "applied" / f"{key}.json"


def record_applied(spec: Spec, spec_path: str | Path) -> None:
    """Remember the spec of the last successful apply (for the next plan's field diff)."""
    path = applied_spec_path(spec_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec.model_dump(mode="json"), indent=2, sort_keys=True))


def last_applied(spec_path: str | Path) -> Spec | None:
    path = applied_spec_path(spec_path)
    if not path.exists():
        return None
    try:
        return parse_spec(path.read_text())
    except Exception:
        return None


@dataclass
class PlanResult:
    hosts: dict[str, list[layer_ops.PlannedOp]]
    errors: dict[str, str]
    fields: list[FieldChange] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "fields": [{"path": f.path, "policy": f.policy.value} for f in self.fields],
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


def plan(spec_path: str | Path, limit: str | None = None) -> PlanResult:
    spec = load_spec(spec_path)
    layer_ops.DRY_RUN = {}
    try:
        result = run_deploys(spec_path, limit=limit)
        recorded = layer_ops.DRY_RUN
    finally:
        layer_ops.DRY_RUN = None
    hosts = {name: recorded.get(name, []) for name in result.hosts}
    errors = {name: h.error for name, h in result.hosts.items() if h.error}
    old = last_applied(spec_path)
    return PlanResult(hosts, errors, diff_specs(old, spec) if old else [])
