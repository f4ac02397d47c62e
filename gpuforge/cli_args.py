"""What several commands share for their arguments: the SPEC argument and the options several take
(``-v``, ``--log-file``, ``--tags``, ``--strict``), a refusal (exit 2, nothing touched), the nodes
``--limit`` selects, the layers ``--tags``/``--skip-tags`` select, the spec loaded with its warnings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from gpuforge.console import console
from gpuforge.progress import LOG_FILE_HELP, VERBOSE_HELP, configure_logging
from gpuforge.spec import Spec, SpecError, load_or_exit
from gpuforge.spec.layer_tags import TAGS

if TYPE_CHECKING:
    from gpuforge.spec.layer_tags import LayerSelection

err = console(stderr=True)

SpecArg = Annotated[Path, typer.Argument(help="Cluster spec (YAML)", exists=False)]
VerboseOpt = Annotated[int, typer.Option("-v", "--verbose", count=True, help=VERBOSE_HELP)]
LogFileOpt = Annotated[Path | None, typer.Option("--log-file", help=LOG_FILE_HELP, dir_okay=False)]
TAGS_HELP = f"Only these layers, comma-separated: {', '.join(TAGS)} (site: the site's Ansible steps)"
TagsOpt = Annotated[str | None, typer.Option("--tags", help=TAGS_HELP)]
SkipTagsOpt = Annotated[str | None, typer.Option("--skip-tags", help="Leave these layers out (the names of --tags)")]
StrictOpt = Annotated[bool, typer.Option("--strict", help="Exit 2 when the spec has warnings (printed first): for CI")]


def refuse(message: str) -> NoReturn:
    """Exit 2 with ``message`` (bad input: nothing was touched)."""
    err.print(message, markup=False, highlight=False)
    raise typer.Exit(2)


def check_limit(loaded: Spec, limit: str | None) -> None:
    """A ``--limit`` that names no node: exit 2 now, before anything else is asked or touched."""
    limited(loaded, limit)


def limited(loaded: Spec, limit: str | None) -> list[str] | None:
    """The nodes ``--limit`` selects (None: no limit, every node); exit 2 naming what is known when it
    names no node of the spec or leaves none (one parser and one error for every command)."""
    from gpuforge.spec import select_limit

    if not limit:
        return None
    try:
        return select_limit(loaded, limit)
    except SpecError as e:
        refuse(e.format())


def layer_selection(tags: str | None, skip_tags: str | None) -> LayerSelection | None:
    """``--tags``/``--skip-tags`` as a selection (None: every layer), or exit 2 naming the bad tag."""
    from gpuforge.spec.layer_tags import TagError, select_layers

    try:
        return select_layers(tags, skip_tags)
    except TagError as e:
        refuse(str(e))


def setup_logging(verbose: int, log_file: Path | None) -> None:
    """``-v`` and ``--log-file`` set up, or exit 2 naming a log file that cannot be opened."""
    from gpuforge.spec.redact import redact_url_credentials

    try:
        configure_logging(verbose, log_file, redact_url_credentials)
    except OSError as e:
        err.print(f"--log-file {log_file}: cannot open it: {e.strerror or e}", markup=False, highlight=False)
        raise typer.Exit(2) from None


def print_warnings(s: Spec, path: Path, strict: bool) -> None:
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


def load_known(path: Path, data: bytes | None = None) -> Spec:
    """:func:`~gpuforge.spec.load_or_exit` (of ``data``, the file's bytes, when already read), and exit 2
    while a ``discover: true`` group has no figures yet (render, plan, apply)."""
    from gpuforge.spec.hardware_rules import DISCOVER_FIRST, unknown_hardware

    s = load_or_exit(path, data=data)
    unknown = unknown_hardware(s)
    if unknown:
        refuse(f"{path}: node group(s) {', '.join(unknown)} have discover: true and no discovered figures: "
                f"{DISCOVER_FIRST.replace('SPEC', str(path))}")  # fmt: skip
    return s
