"""The ``gpuforge`` command line: the app, ``--version``, the entry point and its signal handling, and
:data:`COMMANDS`, the table of every command and the module whose function runs it."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import typer

from gpuforge import cli_bundle, cli_converge, cli_discover, cli_kube, cli_log, cli_spec
from gpuforge.acceptance import cli as accept_cli
from gpuforge.bmc import cli as power_cli
from gpuforge.console import help_settings
from gpuforge.image import cli as image_cli
from gpuforge.lab import cli as lab_cli
from gpuforge.orchestrate import slurm_build_cli, slurm_upgrade_cli
from gpuforge.provision import cli as provision_cli
from gpuforge.validator import cli as validator_cli

app = typer.Typer(
    name="gpuforge",
    help="Declarative provisioning and validation for GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's help: flags and counts show no type, paragraphs re-wrapped to the width
    context_settings=help_settings(),
)


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


@dataclass(frozen=True)
class Group:
    """A command group: its typer app and the line ``gpuforge --help`` shows for it."""

    app: typer.Typer
    help: str


#: Every command of ``gpuforge``, in the order ``gpuforge --help`` lists them (typer lists the groups
#: last): its name, and the function (or group) that runs it, named by its module.
COMMANDS: tuple[tuple[str, Callable[..., object] | Group], ...] = (
    # the spec: checked, listed, its schema, the hardware it uses (discover reads the nodes), its files
    ("check", cli_spec.check),
    ("inventory", cli_spec.inventory),
    ("schema", cli_spec.schema),
    ("discover", cli_discover.discover),
    ("render", cli_spec.render),
    # the nodes: what would change, converging them, what they give back
    ("plan", cli_converge.plan),
    ("apply", cli_converge.apply),
    ("kubeconfig", cli_kube.kubeconfig),
    # offline mode's bundle of packages
    ("bundle", cli_bundle.bundle),
    # the running cluster: checks, acceptance jobs, Slurm's own upgrade and build, the run logs
    ("validate", validator_cli.validate_typer),
    ("health", validator_cli.health_typer),
    ("accept", accept_cli.accept_typer),
    ("replace", accept_cli.replace_typer),
    ("slurm-upgrade", slurm_upgrade_cli.upgrade_typer),
    ("slurm-build", slurm_build_cli.slurm_build_typer),
    ("log", cli_log.log_cmd),
    # network boot of the nodes: its plan and its files (dnsmasq, iPXE)
    ("provision", provision_cli.provision),
    # command groups
    ("lab", Group(lab_cli.app, "The built-in lab: Debian nodes as containers on this machine")),
    ("image", Group(image_cli.app, "Node images baked from the spec (docs/images.md)")),
    ("power", Group(power_cli.app, "Node power through each node's BMC: Redfish or IPMI (docs/bare-metal.md)")),
)


def _register(commands: tuple[tuple[str, Callable[..., object] | Group], ...]) -> None:
    """Add each command (or group) to the app, in the table's order."""
    for name, runs in commands:
        if isinstance(runs, Group):
            app.add_typer(runs.app, name=name, help=runs.help)
        else:
            app.command(name)(runs)


_register(COMMANDS)


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
