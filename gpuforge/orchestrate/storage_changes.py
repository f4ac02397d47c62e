"""Which nodes a rolling ``storage`` change drains: those whose own mount units change.

A storage field is rolling because a changed mount unit remounts (``systemctl restart``) and a
removed one is unmounted (``systemctl stop``). That happens only on the nodes whose unit the
change adds, changes or removes, so only they are drained; a node whose units stay byte for byte
the same (another group's mount, an export no mount of it uses, an ``external`` mount, for which
gpuforge writes nothing) keeps running its jobs.

Invariant: a node is left out only when, for every mount the change can touch, the unit gpuforge
writes there (path and text, as rendered from each spec) is the same in the old and new spec, or
absent in both.
"""

from __future__ import annotations

from gpuforge.render.storage import node_units
from gpuforge.spec import Spec, resolve_nodes
from gpuforge.spec.diff import FieldChange


def is_storage(change: FieldChange) -> bool:
    return change.loc[:1] == ("storage",)


def touched_mounts(old: Spec, new: Spec, change: FieldChange) -> set[str] | None:
    """Names of the mounts ``change`` can alter (None: any of them). A mount is matched by name in
    both specs (``diff_specs`` keys list items by name); an export's change touches the mounts of it."""
    loc = change.loc
    if len(loc) > 2 and loc[1] == "mounts":
        return {str(loc[2])}
    if len(loc) > 2 and loc[1] == "exports":
        return {m.name for s in (old, new) for m in s.storage.mounts if m.export == loc[2]}
    return None


def changed_nodes(old: Spec, new: Spec, change: FieldChange) -> list[str]:
    """Nodes of ``new`` (in its order) whose mount units differ from ``old``'s for the mounts
    ``change`` touches: added, changed or removed."""
    names = touched_mounts(old, new, change)
    before, after = node_units(old, names), node_units(new, names)
    return [n.name for n in resolve_nodes(new) if before.get(n.name, {}) != after.get(n.name, {})]
