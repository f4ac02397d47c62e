"""CLI glue: ``gpuforge validate`` and ``gpuforge health`` as plain functions (and typer wrappers)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuforge.console import console
from gpuforge.progress import LOG_FILE_HELP, VERBOSE_HELP, configure_logging, status_printer
from gpuforge.spec import LIMIT_HELP, SpecError, load_spec
from gpuforge.spec.redact import redact_url_credentials
from gpuforge.validator.node import base

# The validator itself (checks, runner, node program) is imported by the commands that run it, so
# that every other gpuforge command starts without it.


def validate_cmd(
    spec: Path,
    json_out: bool = False,
    junit: Path | None = None,
    prom: Path | None = None,
    limit: str | None = None,
    checks: str | None = None,
) -> int:
    """Validate a running cluster against SPEC; 0 all passed, 1 a check failed, 2 could not run."""
    from gpuforge.spec.cluster import Cluster
    from gpuforge.validator.registry import UnknownCheck
    from gpuforge.validator.report import write_atomic
    from gpuforge.validator.runner import validate

    err = console(stderr=True)
    try:
        s = load_spec(spec)
    except SpecError as e:
        print(e.format(), file=sys.stderr)
        return 2
    try:
        with err.status("validating") as status:
            report = validate(Cluster.of(s, spec), checks=checks, limit=limit, on_event=status_printer(err, status))
    except SpecError as e:  # --limit names no node of the spec
        print(e.format(), file=sys.stderr)
        return 2
    except (UnknownCheck, ValueError) as e:
        print(f"gpuforge validate: {e}", file=sys.stderr)
        return 2
    if json_out:
        sys.stdout.write(report.to_json())
    else:
        report.print(console())
    try:
        if junit is not None:
            write_atomic(junit, report.to_junit())
        if prom is not None:
            write_atomic(prom, report.to_prometheus())
    except OSError as e:
        print(f"gpuforge validate: cannot write a report file: {e}", file=sys.stderr)
        return 2
    return report.exit_code


def health_cmd(config: Path = Path(base.DEFAULT_CONFIG), slurm: bool = False, json_out: bool = False,
               prom: Path | None = None) -> int:  # fmt: skip
    """Run the node-local checks on this machine (as ``gpuforge-health`` does); 0 pass, 1 fail, 2 no config."""
    argv = ["--config", str(config)]
    argv += ["--slurm"] if slurm else ["--no-slurm"]
    argv += ["--json"] if json_out else []
    argv += ["--prom", str(prom)] if prom else []
    from gpuforge.validator import nodelocal

    return nodelocal.main(argv)


def list_checks_text() -> str:
    """Every check ``--checks`` takes: id, layer, severity and what it checks, one per line; then the layers."""
    from gpuforge.validator.registry import ALL_CHECKS

    width = max(len(c.id) for c in ALL_CHECKS)
    lines = [f"{'id':<{width}}  {'layer':<10}  {'severity':<8}  description"]
    lines += [f"{c.id:<{width}}  {c.layer:<10}  {c.severity:<8}  {c.description}" for c in ALL_CHECKS]
    layers = sorted({c.layer for c in ALL_CHECKS}, key=base.LAYERS.index)
    lines.append(f"--checks takes ids, id prefixes (driver, driver.*) and layers: {', '.join(layers)}")
    return "\n".join(lines) + "\n"


def _list_checks(value: bool) -> None:
    if value:
        sys.stdout.write(list_checks_text())
        raise typer.Exit(0)


def _logging(verbose: int, log_file: Path | None) -> None:
    """``-v`` and ``--log-file`` set up, or exit 2 naming a log file that cannot be opened."""
    try:
        configure_logging(verbose, log_file, redact_url_credentials)
    except OSError as e:
        print(f"--log-file {log_file}: cannot open it: {e.strerror or e}", file=sys.stderr)
        raise typer.Exit(2) from None


def validate_typer(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML)")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as one JSON document on stdout")] = False,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML here")] = None,
    prom: Annotated[Path | None, typer.Option("--prom", help="Write a node-exporter textfile here")] = None,
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP)] = None,
    checks: Annotated[
        str | None, typer.Option(help="Check ids, prefixes or layers, comma-separated (see --list-checks)")
    ] = None,
    list_checks: Annotated[
        bool,
        typer.Option(
            "--list-checks", is_eager=True, callback=_list_checks, help="Print the checks --checks takes, and exit"
        ),
    ] = False,
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help=VERBOSE_HELP)] = 0,
    log_file: Annotated[Path | None, typer.Option("--log-file", help=LOG_FILE_HELP, dir_okay=False)] = None,
) -> None:
    """Check the running cluster against the spec: hardware, driver, scheduler, jobs, monitoring, security.

    Exit status: 0 every check passed or was skipped; 1 a check failed; 2 it could not run (a bad spec,
    --limit or --checks, or a report file that could not be written).
    """
    _logging(verbose, log_file)
    raise typer.Exit(validate_cmd(spec, json_out, junit, prom, limit, checks))


def health_typer(
    config: Annotated[Path, typer.Option(help="Node check config")] = Path(base.DEFAULT_CONFIG),
    slurm: Annotated[bool, typer.Option("--slurm", help="Drain this node on failure, resume it when healthy")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as one JSON document on stdout")] = False,
    prom: Annotated[Path | None, typer.Option("--prom", help="Write a node-exporter textfile here")] = None,
) -> None:
    """Run this node's health checks (what Slurm's HealthCheckProgram runs)."""
    raise typer.Exit(health_cmd(config, slurm, json_out, prom))
