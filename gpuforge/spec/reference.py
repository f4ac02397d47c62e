"""The spec reference in Markdown, generated from the models (``gpuforge schema --markdown``)."""

from __future__ import annotations

import typing
from enum import Enum

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from gpuforge.spec.limits import markdown_table
from gpuforge.spec.load import _unwrap
from gpuforge.spec.model import Spec
from gpuforge.spec.policy import POLICY_KEY

PIPE = "\\|"  # a literal | inside a Markdown table cell


def _type_name(annotation: typing.Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, __import__("types").UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    if origin is dict:
        return f"map[{_type_name(args[0])}, {_type_name(args[1])}]"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " | ".join(f"`{m.value}`" for m in annotation)
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _default(info: typing.Any) -> str:
    if info.default_factory is not None:
        value = info.default_factory()
        if isinstance(value, BaseModel):
            return "(defaults)"
        return f"`{value!r}`" if value not in ([], {}) else "empty"
    if info.default is PydanticUndefined:
        return "**required**"
    value = info.default
    return f"`{value.value if isinstance(value, Enum) else value!r}`"


def markdown_reference() -> str:
    """Every model of the spec as a Markdown table: field, type, default, update policy, meaning."""
    lines = [
        "# Spec reference",
        "",
        "Generated from the models by `gpuforge schema --markdown`; do not edit by hand.",
        "Update policy: `live` (re-render and reload), `rolling` (drain, change, validate, resume",
        "node by node), `rebuild` (refused on a running cluster).",
        "",
    ]
    seen: set[type[BaseModel]] = set()
    queue: list[tuple[str, type[BaseModel]]] = [("spec", Spec)]
    while queue:
        path, model = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        lines += [f"## `{path}` ({model.__name__})", "", (model.__doc__ or "").strip().splitlines()[0], ""]
        lines += ["| field | type | default | policy | description |", "|---|---|---|---|---|"]
        for name, info in model.model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            desc = (info.description or "").split(" [")[0]
            kind = _type_name(info.annotation).replace("|", PIPE)
            policy = extra.get(POLICY_KEY, "")
            lines.append(f"| `{name}` | {kind} | {_default(info)} | {policy} | {desc} |")
            for sub in _unwrap(info.annotation):
                queue.append((f"{path}.{name}", sub))
        lines.append("")
    return "\n".join(lines + _limits_section())


def _limits_section() -> list[str]:
    """The input limits (``gpuforge.spec.limits``): what a spec is refused for, before any work."""
    return [
        "## Limits",
        "",
        "A spec over one of these is refused before the work the limit bounds: `gpuforge check` (and every",
        "command that reads a spec) exits 2 naming the limit, in well under a second for any file up to the",
        "size limit. The file's size and type are checked before it is read (a device, FIFO or directory is",
        "refused); the YAML's nesting, aliases, values and value lengths while it is parsed (a recursive",
        "alias is refused); the nodes, host names, accounts and partitions are counted from the expressions",
        "as written before any hostlist is expanded or any field is validated. The last row bounds the",
        "`manifest.json` of an offline bundle, which `gpuforge bundle` reads (never through a link).",
        "",
        *markdown_table(),
        "",
    ]
