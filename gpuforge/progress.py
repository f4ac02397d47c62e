"""Progress messages of long runs (apply, validate, bundle), for a person or a CI log.

A run reports through one ``on_event(message)`` callable. Most messages are transient (what is
running now: a terminal shows the latest one in place); a :class:`Milestone` is a line worth
keeping (a layer finished on every node, a node validated), which the CLI prints as a plain line
also when the output is not a terminal, so CI logs read well. A ``Milestone`` is a ``str``: code
that only passes messages on needs no change.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.status import Status


class Milestone(str):
    """A progress message to keep as a line of the log."""

    __slots__ = ()


def status_printer(console: Console, status: Status) -> Callable[[str], None]:
    """An ``on_event`` for the CLI: every message in the status line (terminals), and each
    :class:`Milestone` also printed as a plain line (kept in CI logs)."""

    def on_event(message: str) -> None:
        if isinstance(message, Milestone):
            console.print(message, markup=False, highlight=False)
        status.update(message)

    return on_event
