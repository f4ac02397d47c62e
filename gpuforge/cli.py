"""The ``gpuforge`` command line."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.table import Table
from rich.text import Text

from gpuforge.console import console, help_settings
from gpuforge.progress import LOG_FILE_HELP, VERBOSE_HELP, configure_logging, status_printer
from gpuforge.spec import LIMIT_HELP, Spec, SpecError, load_or_exit, load_spec, resolve_nodes, spec_json_schema
from gpuforge.spec.layer_tags import TAGS

app = typer.Typer(
    name="gpuforge",
    help="Declarative provisioning and validation for GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's help: flags and counts show no type, paragraphs re-wrapped to the width
    context_settings=help_settings(),
)
out = console()
err = console(stderr=True)


def version_text() -> str:
    """``gpuforge <version> (Python <version>)``: the installed package's version, else the source tree's."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from gpuforge import __version__

    try:
        own = version("gpuforge")
    except PackageNotFoundError:  # run from a checkout that is not installed
        own = __version__
    return f"gpuforge {own} (Python {platform.python_version()})"


def _show_version(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_show_version, help="Print the version and exit"),
    ] = False,
) -> None:
    """Declarative provisioning and validation for GPU clusters."""


if TYPE_CHECKING:
    from rich.status import Status

    from gpuforge.bundle.build import BundleResult
    from gpuforge.deploy.run import ApplyResult
    from gpuforge.orchestrate.apply import ApplyPreview
    from gpuforge.orchestrate.plan import PlanResult
    from gpuforge.orchestrate.saved_plan import SavedPlan
    from gpuforge.spec.layer_tags import LayerSelection

SpecArg = Annotated[Path, typer.Argument(help="Cluster spec (YAML)", exists=False)]
VerboseOpt = Annotated[int, typer.Option("-v", "--verbose", count=True, help=VERBOSE_HELP)]
LogFileOpt = Annotated[Path | None, typer.Option("--log-file", help=LOG_FILE_HELP, dir_okay=False)]
TAGS_HELP = f"Only these layers, comma-separated: {', '.join(TAGS)} (site: the site's Ansible steps)"
TagsOpt = Annotated[str | None, typer.Option("--tags", help=TAGS_HELP)]
SkipTagsOpt = Annotated[str | None, typer.Option("--skip-tags", help="Leave these layers out (the names of --tags)")]
StrictOpt = Annotated[bool, typer.Option("--strict", help="Exit 2 when the spec has warnings (printed first): for CI")]
OUT_HELP = "Also save the plan to FILE (0600) for 'gpuforge apply FILE', which applies exactly it or refuses"


def _logging(verbose: int, log_file: Path | None) -> None:
    """``-v`` and ``--log-file`` set up, or exit 2 naming a log file that cannot be opened."""
    from gpuforge.spec.redact import redact_url_credentials

    try:
        configure_logging(verbose, log_file, redact_url_credentials)
    except OSError as e:
        err.print(f"--log-file {log_file}: cannot open it: {e.strerror or e}", markup=False, highlight=False)
        raise typer.Exit(2) from None


def _warnings(s: Spec, path: Path, strict: bool) -> None:
    """Print the spec's warnings (digest_warnings.every_warning); with ``strict``, exit 2 when there are any."""
    from gpuforge.bundle.digest_warnings import every_warning
    from gpuforge.spec.spec_warnings import strict_failure

    warnings = every_warning(s)
    for w in warnings:
        err.print(f"{path}: warning: {w.format()}", markup=False, highlight=False)
    failure = strict_failure(warnings) if strict else None
    if failure:
        err.print(failure, markup=False, highlight=False)
        raise typer.Exit(2)


def _load_known(path: Path) -> Spec:
    """:func:`~gpuforge.spec.load_or_exit`, and exit 2 while a ``discover: true`` group has no figures
    yet (render, plan, apply)."""
    from gpuforge.spec.hardware_rules import DISCOVER_FIRST, unknown_hardware

    s = load_or_exit(path)
    unknown = unknown_hardware(s)
    if unknown:
        _refuse(f"{path}: node group(s) {', '.join(unknown)} have discover: true and no discovered figures: "
                f"{DISCOVER_FIRST.replace('SPEC', str(path))}")  # fmt: skip
    return s


@app.command()
def check(
    spec: SpecArg,
    json_out: Annotated[
        bool, typer.Option("--json", help="The result as one JSON document on stdout: ok, and each problem's place")
    ] = False,
    strict: StrictOpt = False,
) -> None:
    """Validate a spec file ('-': read it from stdin); touch no host. Warnings (what could not be checked,
    what is outside upstream's support) are printed and exit 0, or 2 with --strict."""
    from gpuforge.spec.load import STDIN_NAME, parse_spec_stream

    from_stdin = str(spec) == "-"
    try:  # from stdin: site paths are relative to the current folder; errors name <stdin>
        s = parse_spec_stream(sys.stdin.buffer, Path.cwd()) if from_stdin else load_spec(spec)
    except SpecError as e:
        if json_out:
            print(
                json.dumps(
                    {
                        "ok": False,
                        "errors": [
                            {"path": i.path, "line": i.line, "column": i.column, "node": i.node, "message": i.message}
                            for i in e.issues
                        ],
                    }
                )
            )
        else:
            err.print(e.format(), markup=False, highlight=False)
        raise typer.Exit(2) from None
    nodes = resolve_nodes(s)
    if json_out:
        from gpuforge.bundle.digest_warnings import every_warning

        found = [{"path": w.path, "message": w.message} for w in every_warning(s)]
        ok = not (strict and found)
        print(json.dumps({"ok": ok, "cluster": s.cluster.name, "nodes": len(nodes), "warnings": found}))
        if not ok:
            raise typer.Exit(2)
        return
    shown = Path(STDIN_NAME) if from_stdin else spec
    _warnings(s, shown, strict)  # reported, not refused, unless --strict
    out.print(f"{shown}: OK ({s.cluster.scheduler.value} cluster {s.cluster.name!r}, {len(nodes)} nodes)")


@app.command()
def inventory(
    spec: SpecArg,
    fmt: Annotated[str, typer.Option("--format", help="ansible (JSON, which ansible-playbook -i reads)")] = "ansible",
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP)] = None,
) -> None:
    """Print the spec's nodes as an inventory, to run your own playbooks against the spec."""
    from gpuforge.extensions.ansible_inventory import ansible_inventory, vagrant_hosts

    s = load_or_exit(spec)
    if fmt != "ansible":
        err.print(f"--format {fmt!r}: the formats are: ansible", markup=False, highlight=False)
        raise typer.Exit(2)
    names = _limited(s, limit)
    try:
        doc = ansible_inventory(s, names, vagrant_hosts(s, str(spec.resolve().parent)))
    except (ValueError, LookupError, RuntimeError, OSError) as e:
        err.print(f"inventory: {e}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    print(json.dumps(doc, indent=2))


@app.command()
def schema(
    output: Annotated[Path | None, typer.Option("-o", "--output")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="The Markdown spec reference instead")] = False,
) -> None:
    """Write the JSON Schema of spec files (with each field's x-update-policy)."""
    from gpuforge.spec.reference import markdown_reference

    text = markdown_reference() if markdown else json.dumps(spec_json_schema(), indent=2, sort_keys=True) + "\n"
    if output:
        try:
            output.write_text(text)
        except OSError as e:
            err.print(f"cannot write {output}: {e.strerror or e}", markup=False, highlight=False)
            raise typer.Exit(2) from None
    else:
        sys.stdout.write(text)


@app.command()
def discover(
    spec: SpecArg,
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="The facts read, errors and changes as JSON")] = False,
) -> None:
    """Read each node's CPUs, memory, NUMA, GPUs, NICs and disks over SSH into SPEC's .hardware.json
    (what discover: true groups use). Exit 0; 1 when a node could not be read; 2 on bad input."""
    from gpuforge.orchestrate.discover import discover as run_discover
    from gpuforge.spec import parse_spec
    from gpuforge.spec.load import read_spec_text

    try:  # the spec as written: a facts file that no longer fits is what discover rewrites
        s = parse_spec(read_spec_text(spec), str(spec))
        _check_limit(s, limit)
        result = run_discover(s, spec, limit)
    except SpecError as e:
        _refuse(e.format())
    except OSError as e:
        _refuse(f"cannot write the facts file beside {spec}: {e.strerror or e}")
    if json_out:
        print(json.dumps({"ok": result.ok, "file": str(result.path), "facts": result.facts,
                          "errors": result.errors, "changes": result.changes}, indent=2))  # fmt: skip
    else:
        for line in result.changes:
            out.print(line, markup=False, highlight=False, soft_wrap=True)
        for name, why in result.errors.items():
            err.print(f"{name}: {why}", markup=False, highlight=False, soft_wrap=True)
        out.print(f"{result.path}: {len(result.facts)} node(s) read, {len(result.errors)} not", markup=False)
    raise typer.Exit(0 if result.ok else 1)


#: ``render`` refuses to write more than this in one run (a huge cluster's /etc/hosts per node adds up).
MAX_RENDER_BYTES = 2 * 2**30


@app.command()
def render(
    spec: SpecArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Directory to write files to")],
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP)] = None,
) -> None:
    """Render every node's files into DIR/<node>/<path> (secrets and webhook credentials redacted).

    Each node's folder is replaced whole, so nothing of an earlier render stays; a full render (no
    --limit) also removes the folders of nodes the spec no longer has. Nothing else in DIR is touched.
    """
    from gpuforge.cli_render import RenderTreeError, write_tree
    from gpuforge.render import render_cluster

    s = _load_known(spec)
    names = _limited(s, limit)
    wanted = set(names) if names is not None else None
    rendered = {n: fs for n, fs in render_cluster(s).items() if wanted is None or n in wanted}
    total = sum(len(f.data) for files in rendered.values() for f in files)
    if total > MAX_RENDER_BYTES:
        err.print(
            f"render would write {total / 2**30:.1f} GiB for {len(rendered)} nodes (at most "
            f"{MAX_RENDER_BYTES // 2**30} GiB at once): render some nodes with --limit",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2)
    try:
        written = write_tree(output.resolve(), rendered, full=names is None)
    except RenderTreeError as e:
        err.print(str(e), markup=False, highlight=False)
        raise typer.Exit(2) from None
    except OSError as e:
        err.print(f"cannot write under {output}: {e.strerror or e} ({e.filename})", markup=False, highlight=False)
        raise typer.Exit(2) from None
    out.print(f"wrote {written} files for {len(rendered)} nodes under {output}")


@app.command()
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

    loaded = _load_known(spec)
    if strict:
        _warnings(loaded, spec, strict)
    layers = _layer_selection(tags, skip_tags)
    if out_file is not None and fresh:
        _refuse("--out: a --fresh plan connects to no node, so there is nothing to apply it to; plan without --fresh")
    planned_from = _spec_digest(spec) if out_file is not None else ""  # before planning: the file as planned
    _logging(verbose, log_file)
    try:
        if fresh:
            result = fresh_plan(spec, on_event=_without_credentials(progress_log.info))
        else:
            result = make_plan(spec, limit=limit, layers=layers, on_event=_without_credentials(progress_log.info))
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
        _refuse(str(e))


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
        _refuse(str(e))
    except OSError as e:
        _refuse(f"--out {path}: cannot write it: {e.strerror or e}")
    err.print(f"saved the plan to {path}: 'gpuforge apply {path}' applies exactly it", markup=False, highlight=False)


@app.command()
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

    saved = _saved_plan(spec, limit, tags, skip_tags)
    if saved is not None:
        spec, limit, tags, skip_tags = saved.spec_path, saved.limit, saved.tags, saved.skip_tags
    loaded = _load_known(spec)
    if strict:
        _warnings(loaded, spec, strict)
    _check_limit(loaded, limit)
    layers = _layer_selection(tags, skip_tags)
    if layers is not None and allow_reboot:
        _refuse("--allow-reboot: a run with --tags/--skip-tags never drains or reboots a node; apply without them")
    if not yes and saved is None and not stdin_is_terminal():
        _refuse(
            "apply shows the plan and asks before it changes anything, and stdin is not a terminal: "
            "pass --yes (-y) to apply without asking (scripts, CI), or run it on a terminal"
        )
    _logging(verbose, log_file)
    with _apply_errors(), err.status("applying") as status:
        result = run_apply(
            spec,
            limit=limit,
            on_event=_without_credentials(status_printer(err, status)),
            force=force,
            allow_reboot=allow_reboot,
            include_drained=include_drained,
            layers=layers,
            confirm=_confirmer(spec, limit, layers, status, ask=not yes and saved is None, saved=saved),
        )
    _print_apply(result, spec, json_out)
    raise typer.Exit(apply_exit_code(result))


def _saved_plan(path: Path, limit: str | None, tags: str | None, skip_tags: str | None) -> SavedPlan | None:
    """``apply FILE`` with a plan file: the saved plan, its spec file checked unchanged; None for a
    spec. Exit 2 when the plan cannot be used or --limit/--tags/--skip-tags try to change it."""
    from gpuforge.orchestrate.saved_plan import PlanFileError, check_spec_unchanged, is_plan_file, read_plan

    if not is_plan_file(path):
        return None
    if limit is not None or tags is not None or skip_tags is not None:
        _refuse(f"{path} is a saved plan: it has its own --limit/--tags/--skip-tags; plan again to change them")
    try:
        saved = read_plan(path)
        check_spec_unchanged(saved)
    except PlanFileError as e:
        _refuse(str(e))
    return saved


@contextmanager
def _apply_errors() -> Iterator[None]:
    """apply's refusals as one message each and exit 2 (nothing touched); vagrant machines that are
    not up: exit 1."""
    from gpuforge.deploy.runlog import RunLogUnwritable
    from gpuforge.orchestrate.applied_record import ApplyLocked, RecordUnreadable
    from gpuforge.orchestrate.apply import ApplyCancelled, ApplyRefused
    from gpuforge.orchestrate.saved_plan import PlanFileError
    from gpuforge.probes.vagrant import VagrantError

    try:
        yield
    except ApplyCancelled:
        _refuse("apply cancelled: nothing was changed")
    except (ApplyRefused, ApplyLocked, RecordUnreadable, RunLogUnwritable, PlanFileError) as e:
        _refuse(str(e))
    except SpecError as e:
        _refuse(e.format())
    except VagrantError as e:  # the spec is fine; its vagrant machines are not up
        err.print(str(e), markup=False, highlight=False)
        raise typer.Exit(1) from None


def _without_credentials(on_event: Callable[[str], None]) -> Callable[[str], None]:
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


def _refuse(message: str) -> NoReturn:
    """Exit 2 with ``message`` (bad input: nothing was touched)."""
    err.print(message, markup=False, highlight=False)
    raise typer.Exit(2)


def _check_limit(loaded: Spec, limit: str | None) -> None:
    """A ``--limit`` that names no node: exit 2 now, before anything else is asked or touched."""
    _limited(loaded, limit)


def _limited(loaded: Spec, limit: str | None) -> list[str] | None:
    """The nodes ``--limit`` selects (None: no limit, every node); exit 2 naming what is known when it
    names no node of the spec or leaves none (one parser and one error for every command)."""
    from gpuforge.spec import select_limit

    if not limit:
        return None
    try:
        return select_limit(loaded, limit)
    except SpecError as e:
        _refuse(e.format())


def _layer_selection(tags: str | None, skip_tags: str | None) -> LayerSelection | None:
    """``--tags``/``--skip-tags`` as a selection (None: every layer), or exit 2 naming the bad tag."""
    from gpuforge.spec.layer_tags import TagError, select_layers

    try:
        return select_layers(tags, skip_tags)
    except TagError as e:
        _refuse(str(e))


def _confirmer(
    spec: Path, limit: str | None, layers: LayerSelection | None, status: Status, ask: bool, saved: SavedPlan | None
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
        planned = make_plan(spec, limit=limit, layers=layers)
        if saved is not None:
            check_spec_unchanged(saved)
            differs = moved(saved, planned)
            if differs:
                raise PlanFileError(refusal(spec, differs))
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


def _print_apply(result: ApplyResult, spec: Path, json_out: bool) -> None:
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


@app.command()
def kubeconfig(
    spec: SpecArg,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Where to write it (0600)")] = None,
) -> None:
    """Copy the cluster's admin kubeconfig from the first control plane to this machine (0600)."""
    from gpuforge.orchestrate.kubeconfig import KubeconfigError, fetch

    loaded = load_or_exit(spec)
    try:
        path = fetch(loaded, spec, output)
    except KubeconfigError as e:
        err.print(str(e), markup=False, highlight=False)
        raise typer.Exit(1) from None
    out.print(f"KUBECONFIG={path}", markup=False, highlight=False)


FINGERPRINT_HELP = (
    "The bundle key's fingerprint as 'gpuforge bundle' printed it (--verify needs it, or SPEC's "
    "sources.bundle_fingerprint); when building, the existing key is kept only if it is this one"
)


@app.command()
def bundle(
    spec: Annotated[Path | None, typer.Argument(help="Cluster spec (YAML)", exists=False)] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Bundle directory to fill")] = None,
    verify: Annotated[
        Path | None,
        typer.Option("--verify", help="Check this bundle: its manifest signed by the pinned key, then every file"),
    ] = None,
    fingerprint: Annotated[str | None, typer.Option("--fingerprint", help=FINGERPRINT_HELP)] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="The bundle's manifest (or the --verify result) as JSON on stdout")
    ] = False,
) -> None:
    """Gather the NVIDIA stack's packages and release files for offline mode (or --verify a bundle).
    An offline SPEC need not pin sources.bundle_fingerprint yet: the build prints the key to pin."""
    from gpuforge.bundle.build import build_bundle
    from gpuforge.bundle.build import tools_missing as bundle_tools_missing
    from gpuforge.spec.load import UNPINNED_BUNDLE

    pin = _fingerprint_option(fingerprint)
    if verify is not None:
        if pin is None and spec is not None:
            pin = load_or_exit(spec, UNPINNED_BUNDLE).sources.bundle_fingerprint
        _verify_bundle(verify, pin, json_out)
    if spec is None or output is None:
        err.print("usage: gpuforge bundle SPEC -o DIR, or gpuforge bundle --verify DIR --fingerprint FPR", markup=False)
        raise typer.Exit(2)
    s = load_or_exit(spec, UNPINNED_BUNDLE)
    missing_tools = bundle_tools_missing(s)
    if missing_tools:
        err.print(
            f"gpuforge bundle checks and makes repository signatures with {', '.join(missing_tools)}, "
            "which this host lacks: apt-get install gnupg rpm (dnf install gnupg2 rpm)",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2)
    try:
        result = build_bundle(s, spec, output, log=_say, fingerprint=pin)
    except OSError as e:
        err.print(f"cannot write the bundle in {output}: {e}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    if json_out:
        print(json.dumps(result.manifest, indent=2))
    else:
        _print_bundle(result, output, pin or s.sources.bundle_fingerprint)
    raise typer.Exit(0 if result.complete else 1)


def _say(message: str) -> None:
    err.print(message, markup=False, highlight=False)


def _fingerprint_option(value: str | None) -> str | None:
    """``--fingerprint`` as the one form comparisons use, or exit 2 naming what is wrong."""
    from gpuforge.spec.openpgp import openpgp_fingerprint

    if value is None:
        return None
    try:
        return openpgp_fingerprint(value)
    except ValueError as e:
        err.print(f"--fingerprint: {e}", markup=False, highlight=False)
        raise typer.Exit(2) from None


def _verify_bundle(bundle_dir: Path, pin: str | None, json_out: bool) -> None:
    """``bundle --verify``: exit 0 when the bundle checks out against the pinned key, 1 when it
    does not, 2 when no key is pinned (nothing is checked: the bundle cannot vouch for itself)."""
    from gpuforge.bundle.verify import verify_bundle

    if pin is None:
        err.print(
            f"{bundle_dir}: not verified: --verify needs --fingerprint FPR, the bundle key fingerprint "
            "'gpuforge bundle' printed (or SPEC with sources.bundle_fingerprint); a bundle's own manifest "
            "and key cannot vouch for it",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2)
    problems = verify_bundle(bundle_dir, pin)
    if json_out:
        print(json.dumps({"ok": not problems, "fingerprint": pin, "problems": problems}, indent=2))
    else:
        for p in problems:
            err.print(f"{bundle_dir}: {p}", markup=False, highlight=False)
        summary = f"{bundle_dir}: {f'OK (signed by {pin})' if not problems else f'{len(problems)} problem(s)'}"
        out.print(summary, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1 if problems else 0)


def _print_bundle(result: BundleResult, output: Path, pinned: str | None) -> None:
    """What a build did, the bundle key's fingerprint to pin, and whether the spec's pin still holds."""
    m = result.manifest
    size = sum(f["size"] for f in m["files"])
    out.print(
        f"{output}: {len(m['files'])} files ({size / 2**20:.1f} MiB): {result.downloaded} downloaded, "
        f"{result.reused} reused, {result.removed} stale removed",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    for r in m["repositories"]:
        ext = len(r["external"])
        signers = sorted({src["signed_by"] for src in r["sources"] if src.get("signed_by")})
        checked = sorted({src["checked"] for src in r["sources"] if src.get("checked") and not src.get("signed_by")})
        signed = f", index signed by {', '.join(signers)}" if signers else ""
        signed += f", checked: {', '.join(checked)}" if checked else ""
        line = f"  {r['path']}/: {len(r['packages'])} packages, {ext} external dependencies{signed}"
        out.print(line, soft_wrap=True, markup=False, highlight=False)
    key = m["signing"].get("fingerprint") if m["signing"] else None
    if key:
        out.print(f"  signed with bundle key {key} ({m['signing']['key']}, manifest.json.asc)", soft_wrap=True)
        out.print(f"  pin it: sources.bundle_fingerprint: {key}", soft_wrap=True, markup=False, highlight=False)
        if pinned is not None and pinned != key:
            err.print(
                f"the bundle key changed: sources.bundle_fingerprint is {pinned}, this bundle is signed by {key} "
                "(a build that changes the bundle signs it with a new key): pin the new one",
                markup=False,
                highlight=False,
            )
    for miss in m["missing"]:
        err.print(f"missing {miss['what']}: {miss['error']}", markup=False, highlight=False)
    out.print("complete" if result.complete else "INCOMPLETE: see manifest.json (missing)", soft_wrap=True)


def _register_subcommands() -> None:
    from gpuforge import cli_log
    from gpuforge.acceptance import cli as accept_cli
    from gpuforge.image.cli import app as image_app
    from gpuforge.lab.cli import app as lab_app
    from gpuforge.orchestrate.slurm_upgrade_cli import upgrade_typer
    from gpuforge.validator import cli as validator_cli

    app.add_typer(lab_app, name="lab", help="The built-in lab: Debian nodes as containers on this machine")
    app.add_typer(image_app, name="image", help="Node images baked from the spec (docs/images.md)")
    app.command("validate")(validator_cli.validate_typer)
    app.command("health")(validator_cli.health_typer)
    app.command("accept")(accept_cli.accept_typer)
    app.command("replace")(accept_cli.replace_typer)
    app.command("slurm-upgrade")(upgrade_typer)
    app.command("log")(cli_log.log_cmd)


_register_subcommands()


def _interrupted(signum: int, frame: object) -> None:
    """Stop at once, with one line and no traceback (gevent would print one per running host).

    Nothing is left half-written by stopping here: files on nodes are renamed into place, the
    control host's records are written atomically, and the apply lock goes with the process.
    """
    del frame
    name = signal.Signals(signum).name
    os.write(2, f"gpuforge: stopped by {name}; nothing is half-written, run the command again\n".encode())
    os._exit(128 + signum)


def main() -> None:
    """Entry point."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupted)
    app(prog_name="gpuforge")  # also under "python -m gpuforge": completion scripts name the command


if __name__ == "__main__":
    main()
