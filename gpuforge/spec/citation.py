"""Where an upstream fact comes from: every cited data table of the spec uses this one type."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Citation:
    """Where a fact comes from: a page or a repository file, and the section that says it."""

    title: str
    where: str
    section: str
