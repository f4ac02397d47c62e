"""``gpuforge plan`` and ``gpuforge apply``: what would change on each node, and converging the nodes
to the spec (registered by :mod:`gpuforge.cli`; apply's helpers are in :mod:`gpuforge.cli_apply`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuforge.cli_apply import (
    apply_errors,
    apply_exit_code,
    apply_input,
    confirmer,
    print_apply,
    stdin_is_terminal,
    without_credentials,
)
from gpuforge.cli_args import (
    LogFileOpt,
    SkipTagsOpt,
    SpecArg,
    StrictOpt,
    TagsOpt,
    VerboseOpt,
    check_limit,
    layer_selection,
    load_known,
    print_warnings,
    refuse,
    setup_logging,
)
from gpuforge.console import console
from gpuforge.progress import status_printer
from gpuforge.spec import LIMIT_HELP, SpecError
from gpuforge.spec.cluster import Cluster

if TYPE_CHECKING:
    from gpuforge.orchestrate.plan import PlanResult


out = console()
err = console(stderr=True)

OUT_HELP = "Also save the plan to FILE (0600) for 'gpuforge apply FILE', which applies exactly it or refuses"


def plan(
    spec: SpecArg,
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="The plan as one JSON document on stdout")] = False,
    detailed_exitcode: Annotated[
        bool,
        typer.Option(
            "--detailed-exitcode",
            help="Exit 0 when nothing would change, 2 when changes are pending, 1 on an error (as Terraform's)",
        ),
    ] = False,
    tags: TagsOpt = None,
    skip_tags: SkipTagsOpt = None,
    strict: StrictOpt = False,
    verbose: VerboseOpt = 0,
    log_file: LogFileOpt = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="Connect to nothing: the commands and files a fresh node of each group's platform would get",
        ),
    ] = False,
    out_file: Annotated[Path | None, typer.Option("--out", "-o", help=OUT_HELP, dir_okay=False)] = None,
) -> None:
    """Show what apply would change on each host (nothing is changed; secrets redacted).

    With --out FILE the plan is also saved (0600): 'gpuforge apply FILE' applies exactly it, and
    refuses (exit 2, nothing touched) when the spec file or a node's planned state moved since.
    """
    from gpuforge.orchestrate.fresh import fresh_plan
    from gpuforge.orchestrate.plan import plan as make_plan
    from gpuforge.probes.vagrant import VagrantError
    from gpuforge.progress import progress_log

    loaded = load_known(spec)
    if strict:
        print_warnings(loaded, spec, strict)
    cluster = Cluster.of(loaded, spec)
    layers = layer_selection(tags, skip_tags)
    if out_file is not None and fresh:
        refuse("--out: a --fresh plan connects to no node, so there is nothing to apply it to; plan without --fresh")
    planned_from = _spec_digest(spec) if out_file is not None else ""  # before planning: the file as planned
    setup_logging(verbose, log_file)
    try:
        if fresh:
            result = fresh_plan(cluster, on_event=without_credentials(progress_log.info))
        else:
            result = make_plan(cluster, limit=limit, layers=layers, on_event=without_credentials(progress_log.info))
    except SpecError as e:
        err.print(e.format(), markup=False, highlight=False)
        raise typer.Exit(2) from None
    except VagrantError as e:  # the spec is fine; its vagrant machines are not up
        err.print(str(e), markup=False, highlight=False)
        raise typer.Exit(1) from None
    if json_out:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        result.print(out)
    if out_file is not None:
        _save_plan(out_file, (spec, planned_from), result, (limit, tags, skip_tags))
    raise typer.Exit(result.exit_code(detailed_exitcode))


def _spec_digest(spec: Path) -> str:
    """The spec file's sha256 for ``plan --out``, or exit 2 saying why it cannot be read."""
    from gpuforge.orchestrate.saved_plan import PlanFileError, file_sha256

    try:
        return file_sha256(spec)
    except PlanFileError as e:
        refuse(str(e))


def _save_plan(
    path: Path, spec: tuple[Path, str], result: PlanResult, made_with: tuple[str | None, str | None, str | None]
) -> None:
    """``plan --out``: the plan saved for ``apply FILE`` (not when a node could not be planned:
    such a plan cannot be applied as reviewed); exit 2 when the file cannot be written."""
    from gpuforge.orchestrate.saved_plan import PlanFileError, write_plan

    if not result.ok:
        err.print(f"{path}: not saved: {len(result.errors)} node(s) could not be planned", markup=False)
        return
    try:
        write_plan(path, spec, result, *made_with)
    except PlanFileError as e:
        refuse(str(e))
    except OSError as e:
        refuse(f"--out {path}: cannot write it: {e.strerror or e}")
    err.print(f"saved the plan to {path}: 'gpuforge apply {path}' applies exactly it", markup=False, highlight=False)


def apply(
    spec: Annotated[
        Path, typer.Argument(help="Cluster spec (YAML), or a plan file 'gpuforge plan --out' saved", exists=False)
    ],
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="The result as one JSON document on stdout")] = False,
    force: Annotated[bool, typer.Option(help="Apply changes to rebuild-only fields anyway")] = False,
    allow_reboot: Annotated[
        bool, typer.Option(help="Reboot nodes whose change needs it (a driver), drained first, batch by batch")
    ] = False,
    include_drained: Annotated[
        bool, typer.Option(help="Also change nodes an operator drained or cordoned (they stay drained)")
    ] = False,
    tags: TagsOpt = None,
    skip_tags: SkipTagsOpt = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Apply without asking (what it applies to is still shown first); needed when stdin is not a terminal",
        ),
    ] = False,
    strict: StrictOpt = False,
    verbose: VerboseOpt = 0,
    log_file: LogFileOpt = None,
) -> None:
    """Converge the nodes to the spec without disturbing running work (rolling changes drain first).

    Shows the plan and asks first; with --yes shows the nodes, the rolling change and what --tags
    leaves alone, and goes on. Given a plan file (plan --out),
    applies exactly that plan without asking, with its --limit and --tags, and refuses (exit 2,
    nothing touched) when the spec file or a planned node moved since it was made. Exit status: 0
    converged; 1 a node failed; 2 bad input, a refused change or a declined confirmation (nothing
    touched); 3 converged except nodes left for an operator (a reboot is needed, an operator
    drained them, --tags left them alone).
    """
    from gpuforge.orchestrate.apply import apply as run_apply

    saved, data = apply_input(spec, limit, tags, skip_tags)
    if saved is not None:
        spec, limit, tags, skip_tags = saved.spec_path, saved.limit, saved.tags, saved.skip_tags
    loaded = load_known(spec, data)
    if strict:
        print_warnings(loaded, spec, strict)
    check_limit(loaded, limit)
    cluster = Cluster.of(loaded, spec)
    layers = layer_selection(tags, skip_tags)
    if layers is not None and allow_reboot:
        refuse("--allow-reboot: a run with --tags/--skip-tags never drains or reboots a node; apply without them")
    if not yes and saved is None and not stdin_is_terminal():
        refuse(
            "apply shows the plan and asks before it changes anything, and stdin is not a terminal: "
            "pass --yes (-y) to apply without asking (scripts, CI), or run it on a terminal"
        )
    setup_logging(verbose, log_file)
    with apply_errors(), err.status("applying") as status:
        result = run_apply(
            cluster,
            limit=limit,
            on_event=without_credentials(status_printer(err, status)),
            force=force,
            allow_reboot=allow_reboot,
            include_drained=include_drained,
            layers=layers,
            confirm=confirmer(cluster, limit, layers, status, ask=not yes and saved is None, saved=saved),
        )
    print_apply(result, spec, json_out)
    raise typer.Exit(apply_exit_code(result))
