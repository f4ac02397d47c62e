"""What changed between two specs, each change with its field's update policy."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from gpuforge.spec.errors import format_loc
from gpuforge.spec.load import _unwrap
from gpuforge.spec.model import Spec
from gpuforge.spec.policy import POLICY_KEY, UpdatePolicy


@dataclass(frozen=True)
class FieldChange:
    """One changed leaf: where (``loc``, the field path as a tuple), from what, to what, how applied."""

    loc: tuple[str | int, ...]
    old: Any
    new: Any
    policy: UpdatePolicy

    @property
    def path(self) -> str:
        """``loc`` for people: ``node_groups.gpu.hosts``, ``slurm.partitions[0]``."""
        return format_loc(self.loc)


def _is_container(annotation: object) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_is_container(a) for a in typing.get_args(annotation))
    return origin in (list, dict)


def field_policy(loc: tuple[str | int, ...]) -> UpdatePolicy:
    """The policy of the deepest declared field along ``loc``.

    After a list or mapping field the next part is an item key (a name or an index), never
    a field, even when an item is called like one (a node group named ``hosts``).
    """
    model: type[BaseModel] | None = Spec
    policy = UpdatePolicy.LIVE
    skip_key = False
    for part in loc:
        if model is None:
            break
        if skip_key:
            skip_key = False
            continue
        if isinstance(part, int) or part not in model.model_fields:
            continue
        info = model.model_fields[part]
        skip_key = _is_container(info.annotation)
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        declared = extra.get(POLICY_KEY)
        if isinstance(declared, str):
            policy = UpdatePolicy(declared)
        candidates = _unwrap(info.annotation)
        model = candidates[0] if candidates else None
    return policy


def _walk(old: Any, new: Any, loc: tuple[str | int, ...], out: list[FieldChange]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            _walk(old.get(key), new.get(key), (*loc, key), out)
    elif isinstance(old, list) and isinstance(new, list) and all(isinstance(x, dict) for x in old + new):
        keyed = all("name" in x for x in old + new)
        if keyed:
            o = {x["name"]: x for x in old}
            n = {x["name"]: x for x in new}
            for name in sorted(set(o) | set(n)):
                _walk(o.get(name), n.get(name), (*loc, name), out)
        else:
            for i in range(max(len(old), len(new))):
                _walk(old[i] if i < len(old) else None, new[i] if i < len(new) else None, (*loc, i), out)
    elif old != new:
        out.append(FieldChange(loc, old, new, field_policy(loc)))


def diff_specs(old: Spec, new: Spec) -> list[FieldChange]:
    """Changed leaf fields from ``old`` to ``new``."""
    out: list[FieldChange] = []
    _walk(old.model_dump(mode="json"), new.model_dump(mode="json"), (), out)
    return out


__all__ = ["FieldChange", "diff_specs", "field_policy"]
