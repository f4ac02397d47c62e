"""The ``gpuforge`` command line: the app, ``--version``, the entry point and its signal handling, and
:data:`COMMANDS`, the table of every command and the module whose function runs it."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from gpuforge.console import help_settings


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


def _main(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_show_version, help="Print the version and exit"),
    ] = False,
) -> None:
    """Declarative provisioning and validation for GPU clusters."""


@dataclass(frozen=True)
class Group:
    """A command group: where its typer app is (``module:attribute``) and the line ``gpuforge --help``
    shows for it."""

    app: str
    help: str


#: Every command of ``gpuforge``, in the order ``gpuforge --help`` lists them (typer lists the groups
#: last): its name, and the function (or group) that runs it, as ``module:attribute``. A command's
#: module is imported only when that command runs (or the whole table is listed): ``gpuforge check``
#: does not load pyinfra, the lab or the image code (its start: 1.05 s of CPU instead of 1.4).
COMMANDS: tuple[tuple[str, str | Group], ...] = (
    # the spec: checked, listed, its schema, the hardware it uses (discover reads the nodes), its files
    ("check", "gpuforge.cli_spec:check"),
    ("inventory", "gpuforge.cli_spec:inventory"),
    ("schema", "gpuforge.cli_spec:schema"),
    ("discover", "gpuforge.cli_discover:discover"),
    ("render", "gpuforge.cli_spec:render"),
    # the nodes: what would change, converging them, what they give back
    ("plan", "gpuforge.cli_converge:plan"),
    ("apply", "gpuforge.cli_converge:apply"),
    ("kubeconfig", "gpuforge.cli_kube:kubeconfig"),
    # offline mode's bundle of packages
    ("bundle", "gpuforge.cli_bundle:bundle"),
    # the running cluster: checks, acceptance jobs, Slurm's own upgrade and build, the run logs
    ("validate", "gpuforge.validator.cli:validate_typer"),
    ("health", "gpuforge.validator.cli:health_typer"),
    ("accept", "gpuforge.acceptance.cli:accept_typer"),
    ("replace", "gpuforge.acceptance.cli:replace_typer"),
    ("slurm-upgrade", "gpuforge.orchestrate.slurm_upgrade_cli:upgrade_typer"),
    ("slurm-build", "gpuforge.orchestrate.slurm_build_cli:slurm_build_typer"),
    ("log", "gpuforge.cli_log:log_cmd"),
    # network boot of the nodes: its plan and its files (dnsmasq, iPXE)
    ("provision", "gpuforge.provision.cli:provision"),
    # command groups
    ("lab", Group("gpuforge.lab.cli:app", "The built-in lab: Debian nodes as containers on this machine")),
    ("image", Group("gpuforge.image.cli:app", "Node images baked from the spec (docs/images.md)")),
    (
        "power",
        Group("gpuforge.bmc.cli:app", "Node power through each node's BMC: Redfish or IPMI (docs/bare-metal.md)"),
    ),
)


def _new_app() -> typer.Typer:
    """The app with its callback (``--version``) and no command yet."""
    app = typer.Typer(
        name="gpuforge",
        help="Declarative provisioning and validation for GPU clusters.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # click's help: flags and counts show no type, paragraphs re-wrapped to the width
        context_settings=help_settings(),
    )
    app.callback()(_main)
    return app


def _load(ref: str) -> Any:
    """The object ``module:attribute`` names (its module imported now)."""
    module, attribute = ref.split(":")
    return getattr(importlib.import_module(module), attribute)


def _register(only: str | None = None) -> typer.Typer:
    """The app with each command (or group) of the table added in its order; ``only``: that one alone
    (the command about to run: its help and usage are the same as in the whole app's)."""
    app = _new_app()
    for name, runs in COMMANDS:
        if only is not None and name != only:
            continue
        if isinstance(runs, Group):
            app.add_typer(_load(runs.app), name=name, help=runs.help)
        else:
            app.command(name)(_load(runs))
    return app


def __getattr__(name: str) -> typer.Typer:
    """``gpuforge.cli.app`` for an importer (the docs, the tests): the app with every command."""
    if name == "app":
        globals()["app"] = whole = _register()
        return whole
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    names = {name for name, _ in COMMANDS}
    command = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in names else None
    _register(command)(prog_name="gpuforge")  # also under "python -m gpuforge": completion scripts name the command


if __name__ == "__main__":
    main()
