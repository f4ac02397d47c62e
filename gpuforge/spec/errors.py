"""Spec problems: each names the field path (and node), what is wrong and what is allowed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Loc = tuple[str | int, ...]


def format_loc(loc: Loc) -> str:
    """``('node_groups', 1, 'hosts')`` -> ``node_groups[1].hosts``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a spec file."""

    loc: Loc
    message: str
    node: str | None = None
    line: int | None = None
    column: int | None = None  # 1-based, where known (a YAML syntax error)

    @property
    def path(self) -> str:
        return format_loc(self.loc)

    def format(self, filename: str | None = None) -> str:
        where = ""
        if filename:
            where = f"{filename}:{self.line}: " if self.line else f"{filename}: "
        node = f" (node {self.node})" if self.node else ""
        return f"{where}{self.path}{node}: {self.message}"


class SpecError(Exception):
    """A spec that cannot be used; carries every problem found in the file."""

    def __init__(self, issues: Sequence[SpecIssue], filename: str | None = None) -> None:
        self.issues = list(issues)
        self.filename = filename
        super().__init__(self.format())

    def format(self) -> str:
        head = f"{self.filename or 'spec'}: {len(self.issues)} problem(s)"
        return "\n".join([head, *("  " + i.format(self.filename) for i in self.issues)])
