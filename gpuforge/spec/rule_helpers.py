"""Small helpers the cross-field rules share: duplicates, parent cycles, the nodes of a role.

Pure functions of their arguments; the rule modules (``*_rules.py``) import them, and
:mod:`gpuforge.spec.rules` runs the rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from gpuforge.spec.model import Role, Spec


def dupes(items: Iterable[str]) -> list[str]:
    return sorted(k for k, v in Counter(items).items() if v > 1)


def cycles(parent_of: Mapping[str, str]) -> dict[str, tuple[list[str], int]]:
    """Each name on a cycle of ``parent_of`` (child -> parent): that cycle in parent order, and
    where the name is in it.

    Linear time: every name is walked once (a walk stops at a name an earlier walk finished), so a
    chain of thousands of accounts or switches costs thousands of steps, not millions.
    """
    finished: set[str] = set()
    cycles: dict[str, tuple[list[str], int]] = {}
    for start in parent_of:
        walk: list[str] = []
        on_walk: set[str] = set()
        name = start
        while name in parent_of and name not in finished and name not in on_walk:
            walk.append(name)
            on_walk.add(name)
            name = parent_of[name]
        if name in on_walk:
            cycle = walk[walk.index(name) :]
            cycles.update((member, (cycle, at)) for at, member in enumerate(cycle))
        finished.update(walk)
    return cycles


def cycle_text(cycle: list[str], at: int, shown: int = 6) -> str:
    """``a -> b -> c -> a`` from ``cycle[at]``; a long cycle shows its first names and its length."""
    name = cycle[at]
    if len(cycle) > shown:
        first = [cycle[(at + i) % len(cycle)] for i in range(shown)]
        return " -> ".join([*first, f"... ({len(cycle):,} in the cycle)", name])
    return " -> ".join([*cycle[at:], *cycle[:at], name])


def role_nodes(spec: Spec, role: Role) -> list[str]:
    return [name for g in spec.node_groups if role in g.roles for name in g.hostnames]
