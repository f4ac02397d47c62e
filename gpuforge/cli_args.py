"""What several commands share for their arguments: a refusal (exit 2, nothing touched), the nodes
``--limit`` selects, the layers ``--tags``/``--skip-tags`` select."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import typer

from gpuforge.console import console
from gpuforge.spec import Spec, SpecError

if TYPE_CHECKING:
    from gpuforge.spec.layer_tags import LayerSelection

err = console(stderr=True)


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
