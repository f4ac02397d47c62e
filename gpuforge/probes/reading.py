"""One thing gpuforge reads on a node: how to read it and what its output says (stdlib only).

A :class:`Reading` is the single definition of a node reading. The deploy side runs its
``command`` over SSH as a pyinfra fact (``gpuforge.deploy.facts.adapter.reading_fact``); the node
program (``gpuforge-health``, and the node part of ``gpuforge validate``) runs the same command
through ``/bin/sh``, or calls ``local`` where it can read the same thing in-process (sysfs, a
node-local exporter). Both hand the lines to the one ``parse``.

Invariants:

* ``command(*args)`` is a shell command that exits 0 whatever happens and marks what went wrong
  in its output (``__missing=``, ``__rc=``: ``gpuforge.probes._common``).
* ``local(*args)``, where set, returns lines in the command's format (a test compares them).
* ``parse(lines)`` is total: it returns a typed value for any lines and never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Reading(Generic[T]):
    """A node reading: its command (or in-process reader), its time limit and its parser."""

    name: str
    """``<group>.<what>``, e.g. ``nvidia.gpu_query``; recorded outputs live in
    ``tests/facts/fixtures/<group>/``."""
    command: Callable[..., str]
    parse: Callable[[list[str]], T]
    timeout_s: float | Callable[..., float] = 8.0
    """Seconds the node program allows; a function of the command's arguments where they matter."""
    local: Callable[..., list[str]] | None = None

    def timeout(self, *args: Any) -> float:
        """The time limit for ``command(*args)``."""
        return float(self.timeout_s(*args)) if callable(self.timeout_s) else float(self.timeout_s)

    def default(self) -> T:
        """The value when nothing was read (no output at all)."""
        return self.parse([])
