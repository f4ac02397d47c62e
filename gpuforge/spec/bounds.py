"""A spec's counts against the limits, read from its raw YAML data before any field is validated.

Validation expands every hostlist and checks every account; these counts come first, from the
expressions as written (``hostlist.size``: linear in the text, nothing expanded), so a file that
asks for millions of nodes is refused in the time it takes to read it. Data of the wrong shape is
skipped here: validation reports it.
"""

from __future__ import annotations

from typing import Any

from gpuforge.spec import hostlist
from gpuforge.spec.errors import Loc
from gpuforge.spec.limits import ACCOUNTS, HOSTLIST_NAMES, NODES, PARTITIONS


def _names(expr: Any) -> int:
    """Names a hostlist stands for; 0 for what is not a valid one (validation reports it)."""
    if not isinstance(expr, str):
        return 0
    try:
        return hostlist.size(expr)
    except hostlist.HostlistError:
        return 0


def _items(data: Any, *path: str) -> list[Any]:
    """The list at ``path`` in ``data`` (empty when anything on the way is of another shape)."""
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, list) else []


def _group_sizes(data: Any) -> dict[str, int]:
    """Nodes of each node group by name (unnamed groups under their index)."""
    sizes: dict[str, int] = {}
    for i, group in enumerate(_items(data, "node_groups")):
        if isinstance(group, dict):
            name = group.get("name")
            key = name if isinstance(name, str) else f"#{i}"
            sizes[key] = sizes.get(key, 0) + _names(group.get("hosts"))
    return sizes


def _selector_names(selector: Any, groups: dict[str, int]) -> int:
    """Names a partition's ``nodes`` stands for: group names count their nodes."""
    if not isinstance(selector, str):
        return 0
    try:
        parts = hostlist.split_top_level(selector)
    except hostlist.HostlistError:
        return 0
    return sum(groups[part] if part in groups else _names(part) for part in parts)


def count_problems(data: Any) -> list[tuple[Loc, str]]:
    """(where, why) for each limit the raw spec data goes over: nodes, host names, accounts, partitions."""
    problems: list[tuple[Loc, str]] = []
    groups = _group_sizes(data)
    nodes = sum(groups.values())
    if nodes > NODES.value:
        problems.append((("node_groups",), NODES.refusal(nodes)))
    named = nodes
    for group in _items(data, "node_groups"):
        switches = group.get("leaf_switch") if isinstance(group, dict) else None
        if isinstance(switches, dict):
            named += sum(_names(expr) for expr in switches.values())
    partitions = _items(data, "slurm", "partitions")
    named += sum(_selector_names(p.get("nodes"), groups) for p in partitions if isinstance(p, dict))
    if named > HOSTLIST_NAMES.value and nodes <= NODES.value:
        problems.append((("node_groups",), HOSTLIST_NAMES.refusal(named)))
    if len(partitions) > PARTITIONS.value:
        problems.append((("slurm", "partitions"), PARTITIONS.refusal(len(partitions))))
    accounts = _items(data, "slurm", "accounts")
    if len(accounts) > ACCOUNTS.value:
        problems.append((("slurm", "accounts"), ACCOUNTS.refusal(len(accounts))))
    return problems
