"""The ``gpuforge`` command line."""

from __future__ import annotations

import json
import os
import signal
import sys
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
from gpuforge.cli_args import check_limit, layer_selection, limited, refuse
from gpuforge.cli_bundle import fingerprint_option, print_bundle, say, verify_bundle_dir
from gpuforge.console import console, help_settings
from gpuforge.progress import LOG_FILE_HELP, VERBOSE_HELP, configure_logging, status_printer
from gpuforge.spec import LIMIT_HELP, Spec, SpecError, load_or_exit, load_spec, resolve_nodes, spec_json_schema
from gpuforge.spec.cluster import Cluster
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
    from gpuforge.orchestrate.plan import PlanResult

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


def _load_known(path: Path, data: bytes | None = None) -> Spec:
    """:func:`~gpuforge.spec.load_or_exit` (of ``data``, the file's bytes, when already read), and exit 2
    while a ``discover: true`` group has no figures yet (render, plan, apply)."""
    from gpuforge.spec.hardware_rules import DISCOVER_FIRST, unknown_hardware

    s = load_or_exit(path, data=data)
    unknown = unknown_hardware(s)
    if unknown:
        refuse(f"{path}: node group(s) {', '.join(unknown)} have discover: true and no discovered figures: "
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
    names = limited(s, limit)
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
        check_limit(s, limit)
        result = run_discover(Cluster.of(s, spec), limit)
    except SpecError as e:
        refuse(e.format())
    except OSError as e:
        refuse(f"cannot write the facts file beside {spec}: {e.strerror or e}")
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
    names = limited(s, limit)
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
    cluster = Cluster.of(loaded, spec)
    layers = layer_selection(tags, skip_tags)
    if out_file is not None and fresh:
        refuse("--out: a --fresh plan connects to no node, so there is nothing to apply it to; plan without --fresh")
    planned_from = _spec_digest(spec) if out_file is not None else ""  # before planning: the file as planned
    _logging(verbose, log_file)
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

    saved, data = apply_input(spec, limit, tags, skip_tags)
    if saved is not None:
        spec, limit, tags, skip_tags = saved.spec_path, saved.limit, saved.tags, saved.skip_tags
    loaded = _load_known(spec, data)
    if strict:
        _warnings(loaded, spec, strict)
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
    _logging(verbose, log_file)
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


@app.command()
def kubeconfig(
    spec: SpecArg,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Where to write it (0600)")] = None,
) -> None:
    """Copy the cluster's admin kubeconfig from the first control plane to this machine (0600)."""
    from gpuforge.orchestrate.kubeconfig import KubeconfigError, fetch

    loaded = load_or_exit(spec)
    try:
        path = fetch(Cluster.of(loaded, spec), output)
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

    pin = fingerprint_option(fingerprint)
    if verify is not None:
        if pin is None and spec is not None:
            pin = load_or_exit(spec, UNPINNED_BUNDLE).sources.bundle_fingerprint
        verify_bundle_dir(verify, pin, json_out)
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
        result = build_bundle(s, spec, output, log=say, fingerprint=pin)
    except OSError as e:
        err.print(f"cannot write the bundle in {output}: {e}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    if json_out:
        print(json.dumps(result.manifest, indent=2))
    else:
        print_bundle(result, output, pin or s.sources.bundle_fingerprint)
    raise typer.Exit(0 if result.complete else 1)


def _register_subcommands() -> None:
    from gpuforge import cli_log
    from gpuforge.acceptance import cli as accept_cli
    from gpuforge.bmc.cli import app as power_app
    from gpuforge.image.cli import app as image_app
    from gpuforge.lab.cli import app as lab_app
    from gpuforge.orchestrate.slurm_build_cli import slurm_build_typer
    from gpuforge.orchestrate.slurm_upgrade_cli import upgrade_typer
    from gpuforge.validator import cli as validator_cli

    app.add_typer(lab_app, name="lab", help="The built-in lab: Debian nodes as containers on this machine")
    app.add_typer(image_app, name="image", help="Node images baked from the spec (docs/images.md)")
    app.add_typer(power_app, name="power", help="Node power through each node's BMC: Redfish (docs/bare-metal.md)")
    app.command("validate")(validator_cli.validate_typer)
    app.command("health")(validator_cli.health_typer)
    app.command("accept")(accept_cli.accept_typer)
    app.command("replace")(accept_cli.replace_typer)
    app.command("slurm-upgrade")(upgrade_typer)
    app.command("slurm-build")(slurm_build_typer)
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
