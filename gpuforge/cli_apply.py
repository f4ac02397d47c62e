"""``gpuforge apply``'s helpers: a saved plan as input, its refusals, the confirmation, the result."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from gpuforge.cli_args import refuse
from gpuforge.console import console
from gpuforge.spec import SpecError

if TYPE_CHECKING:
    from rich.status import Status

    from gpuforge.deploy.run import ApplyResult
    from gpuforge.orchestrate.apply import ApplyPreview
    from gpuforge.orchestrate.saved_plan import SavedPlan
    from gpuforge.spec.cluster import Cluster
    from gpuforge.spec.layer_tags import LayerSelection

out = console()
err = console(stderr=True)


def apply_input(
    path: Path, limit: str | None, tags: str | None, skip_tags: str | None
) -> tuple[SavedPlan | None, bytes | None]:
    """``apply FILE``, read once: a saved plan (its spec file checked unchanged) or the spec's bytes;
    (None, None) when the file cannot be read (the spec loader then says why). Exit 2 when the plan
    cannot be used or --limit/--tags/--skip-tags try to change it."""
    from gpuforge.orchestrate.saved_plan import PlanFileError, check_spec_unchanged, read_apply_input, read_plan
    from gpuforge.spec.bounded_read import InputFileError

    try:
        is_plan, data = read_apply_input(path)
    except InputFileError:
        return None, None
    if not is_plan:
        return None, data
    if limit is not None or tags is not None or skip_tags is not None:
        refuse(f"{path} is a saved plan: it has its own --limit/--tags/--skip-tags; plan again to change them")
    try:
        saved = read_plan(path, data)
        check_spec_unchanged(saved)
    except PlanFileError as e:
        refuse(str(e))
    return saved, None


@contextmanager
def apply_errors() -> Iterator[None]:
    """apply's refusals as one message each and exit 2 (nothing touched); vagrant machines that are
    not up: exit 1."""
    from gpuforge.deploy.runlog import RunLogUnwritable
    from gpuforge.orchestrate.applied_record import ApplyLocked, RecordUnreadable
    from gpuforge.orchestrate.apply import ApplyCancelled, ApplyRefused
    from gpuforge.orchestrate.saved_plan import PlanFileError
    from gpuforge.orchestrate.slurm_build import SlurmBuildError
    from gpuforge.probes.vagrant import VagrantError

    try:
        yield
    except ApplyCancelled:
        refuse("apply cancelled: nothing was changed")
    except (ApplyRefused, ApplyLocked, RecordUnreadable, RunLogUnwritable, PlanFileError) as e:
        refuse(str(e))
    except SpecError as e:
        refuse(e.format())
    except (VagrantError, SlurmBuildError) as e:  # the spec is fine; its machines are not up, or Slurm's build failed
        err.print(str(e), markup=False, highlight=False)
        raise typer.Exit(1) from None


def without_credentials(on_event: Callable[[str], None]) -> Callable[[str], None]:
    """``on_event`` for messages with URL credentials hidden (a command's output quoting a webhook);
    a :class:`~gpuforge.progress.Milestone` stays one."""
    from gpuforge.progress import Milestone
    from gpuforge.spec.redact import redact_url_credentials

    def shown(message: str) -> None:
        text = redact_url_credentials(message)
        on_event(Milestone(text) if isinstance(message, Milestone) else text)

    return shown


def stdin_is_terminal() -> bool:
    """Whether a person can answer apply's question (stdin is a terminal)."""
    return sys.stdin.isatty()


def confirmer(
    cluster: Cluster,
    limit: str | None,
    layers: LayerSelection | None,
    status: Status,
    ask: bool,
    saved: SavedPlan | None,
) -> Callable[[ApplyPreview], bool]:
    """apply's ``confirm``: when ``ask`` or with a ``saved`` plan, the plan of the same nodes and
    layers and a summary, then, when ``ask``, "Apply these changes? [y/N]" on the terminal (the
    status line paused meanwhile); with --yes the summary apply knows without reading a node again
    (:func:`preview_summary`). With a ``saved`` plan it first proves nothing moved since
    (:mod:`gpuforge.orchestrate.saved_plan`), else raises PlanFileError naming what did."""
    from gpuforge.orchestrate.plan import confirmation_summary, preview_summary
    from gpuforge.orchestrate.plan import plan as make_plan
    from gpuforge.orchestrate.saved_plan import PlanFileError, check_spec_unchanged, moved, refusal

    def confirm(preview: ApplyPreview) -> bool:
        if not ask and saved is None:
            for line in preview_summary(preview):
                err.print(line, markup=False, highlight=False)
            return True
        status.update("planning (nothing is changed)")
        planned = make_plan(cluster, limit=limit, layers=layers)
        if saved is not None:
            check_spec_unchanged(saved)
            differs = moved(saved, planned)
            if differs:
                raise PlanFileError(refusal(cluster.path, differs))
        status.stop()
        for line in confirmation_summary(preview, planned):
            err.print(line, markup=False, highlight=False)
        if ask:
            err.print("Apply these changes? [y/N] ", end="", markup=False, highlight=False)
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                return False
        status.start()
        return True

    return confirm


def apply_exit_code(result: ApplyResult) -> int:
    """0 converged; 1 a node failed; 3 nodes wait for an operator (reboot, operator's drain)."""
    if not result.ok:
        return 1
    return 3 if result.waiting else 0


def print_apply(result: ApplyResult, spec: Path, json_out: bool) -> None:
    """The result as a table or JSON; errors and notes (a command's output) with URL credentials hidden."""
    from gpuforge.spec.redact import redact_url_credentials as shown
    from gpuforge.validator.report import terminal_safe

    if json_out:
        hosts = {
            n: {
                "ok": h.ok,
                "changed": h.changed,
                "unchanged": h.unchanged,
                "error": shown(h.error) if h.error else h.error,
                "notes": [shown(note) for note in h.notes],
            }
            for n, h in result.hosts.items()
        }
        doc = {"ok": result.ok, "changes": result.changes, "hosts": hosts, "waiting": result.waiting}
        print(json.dumps(doc, indent=2))
        return
    table = Table(title=f"apply {spec}")
    for col in ("node", "result", "changed operations"):
        table.add_column(col)
    for name, h in result.hosts.items():
        state = "[red]FAILED[/]" if not h.ok else ("[yellow]changed[/]" if h.changed else "[green]ok[/]")
        detail = h.error if h.error else (", ".join(h.changed) or f"no change ({h.unchanged} checked)")
        if name in result.waiting:
            state, detail = "[magenta]WAITING[/]", f"{result.waiting[name]}\n{detail}"
        if h.notes:
            detail += "\n" + "\n".join(h.notes)
        table.add_row(name, state, Text(terminal_safe(shown(detail))))  # node text: no markup, no escapes
    for name, why in result.waiting.items():
        if name not in result.hosts:
            table.add_row(name, "[magenta]WAITING[/]", Text(terminal_safe(why)))
    out.print(table)
    out.print(f"{result.changes} change(s)")
    if result.waiting:
        out.print(f"{len(result.waiting)} node(s) wait for an operator (exit 3)")
