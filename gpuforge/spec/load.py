"""Load a spec file: YAML -> pydantic model -> cross-field rules, all problems at once."""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gpuforge.spec.errors import Loc, SpecError, SpecIssue
from gpuforge.spec.extensions import missing_site_files
from gpuforge.spec.model import DRIVER_VERSION, NAME, SLURM_TIME, VERSION, Spec
from gpuforge.spec.rules import check_rules

#: Limits that keep a hostile file from exhausting time or memory before it is even checked.
MAX_SPEC_BYTES = 4 * 2**20
MAX_DEPTH = 64
MAX_ALIASES = 256
MAX_EXPANDED_NODES = 1_000_000


def _check_shape(text: str) -> None:
    """Refuse what would blow up YAML composition or expansion: size, nesting, aliases.

    Nesting is measured on the event stream (no recursion); the expanded size counts each
    alias as often as it is used (a "billion laughs" file is a few hundred bytes).
    """
    if len(text.encode("utf-8", errors="replace")) > MAX_SPEC_BYTES:
        raise _LimitError(f"the file is larger than {MAX_SPEC_BYTES // 2**20} MiB")
    depth = aliases = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _LimitError(f"nested deeper than {MAX_DEPTH} levels", _line(event.start_mark))
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise _LimitError(f"more than {MAX_ALIASES} aliases (*name)", _line(event.start_mark))
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None and _expanded_size(root, {}) > MAX_EXPANDED_NODES:
        raise _LimitError(f"its aliases expand to more than {MAX_EXPANDED_NODES:,} values", _line(root.start_mark))


def _line(mark: Any) -> int | None:
    return mark.line + 1 if mark is not None else None


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Values ``node`` stands for once every alias is expanded (memoised per node; depth <= MAX_DEPTH)."""
    known = memo.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(v, memo) for v in node.value)
    memo[id(node)] = min(size, MAX_EXPANDED_NODES + 1)
    return memo[id(node)]


class _LimitError(Exception):
    def __init__(self, what: str, line: int | None = None) -> None:
        self.what, self.line = what, line
        super().__init__(what)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML would keep the last), and keys
    that are not scalars."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value, not a list or mapping", key_node.start_mark
                )
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice (first on line {seen[key]})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _line_map(text: str) -> dict[Loc, int]:
    """Map each YAML path to its 1-based line number."""
    lines: dict[Loc, int] = {}

    def walk(node: yaml.Node, loc: Loc) -> None:
        lines.setdefault(loc, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = (*loc, str(key.value))
                lines[child] = key.start_mark.line + 1
                walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*loc, i))

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


# Where a problem about something absent is best shown: the line that asks for it.
_ABSENT_FALLBACK: dict[Loc, Loc] = {
    ("slurm",): ("cluster", "scheduler"),
    ("kubernetes",): ("cluster", "scheduler"),
    ("versions", "driver"): ("node_groups",),
    ("versions",): ("node_groups",),
    ("monitoring",): ("node_groups",),
}


def _line_for(lines: dict[Loc, int], loc: Loc) -> int | None:
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
        fallback = _ABSENT_FALLBACK.get(loc[:end])
        if fallback is not None and fallback in lines:
            return lines[fallback]
    return None


def _unwrap(annotation: Any) -> list[Any]:
    """Model classes reachable from a field annotation (through Optional, list, dict)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, dict, typing.Annotated):
        return [m for arg in typing.get_args(annotation) for m in _unwrap(arg)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The model class whose fields sit at ``loc`` (for listing allowed keys)."""
    current: type[BaseModel] | None = Spec
    for part in loc:
        if current is None:
            return None
        if isinstance(part, int) or part not in current.model_fields:
            continue
        candidates = _unwrap(current.model_fields[part].annotation)
        current = candidates[0] if candidates else None
    return current


PATTERN_HELP = {
    NAME: "a name starts with a lowercase letter and has only lowercase letters, digits, '-' and '_' (max 63)",
    SLURM_TIME: "a Slurm time such as 30, 1:00:00, 2-00:00:00 or UNLIMITED",
    VERSION: "a version such as 1.17.8",
    DRIVER_VERSION: "a driver version such as 535.261.03 or 550.163.01",
    r"^\d+\.\d+$": "a major.minor version such as 12.4",
    r"^\d+\.\d+\.\d+$": "a version such as 1.31.4",
    r"^v?\d+\.\d+\.\d+$": "a version such as v26.7.0",
    r"^\d+[smh]$": "a duration such as 30s, 5m or 1h",
    r"^\d+[smhdwy]$": "a duration such as 15d or 2w",
}


def _issue_from_pydantic(err: Any, lines: dict[Loc, int]) -> SpecIssue:
    loc: Loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p in ("str", "int"))))
    kind = err["type"]
    msg = str(err["msg"])
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        msg = f"unknown field{hint} allowed here: {', '.join(allowed)}"
    elif kind == "missing":
        msg = "required field is missing"
    elif kind == "string_pattern_mismatch":
        pattern = err.get("ctx", {}).get("pattern", "")
        msg = PATTERN_HELP.get(pattern, f"must match {pattern}")
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    shown = "input" in err and not isinstance(err["input"], dict | list)
    already = shown and (repr(err["input"]) in msg or str(err["input"]) in msg)
    if kind not in ("extra_forbidden", "missing") and shown and not already:
        msg = f"{msg} (got {err['input']!r})"
    return SpecIssue(loc, msg, line=_line_for(lines, loc))


def parse_spec(text: str, filename: str | None = None, base_dir: Path | None = None) -> Spec:
    """Parse and check spec text; raise SpecError listing every problem.

    Site paths (``site.*``) are relative to ``base_dir`` (default: the file's folder) and must
    be there; text with neither (an apply record) is not checked for them.
    """
    try:
        _check_shape(text)
    except _LimitError as e:
        raise SpecError([SpecIssue((), f"refused: {e.what}", line=e.line)], filename) from None
    except yaml.YAMLError:
        pass  # reported with its line below
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise SpecError([SpecIssue((), f"not valid YAML: {getattr(e, 'problem', e)}", line=line)], filename) from None
    if not isinstance(data, dict):
        raise SpecError([SpecIssue((), "a spec is a YAML mapping with at least 'cluster' and 'node_groups'")], filename)
    lines = _line_map(text)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as e:
        issues = [_issue_from_pydantic(err, lines) for err in e.errors()]
        raise SpecError(_dedupe(issues), filename) from None
    problems = check_rules(spec)
    where = base_dir or (Path(filename).parent if filename else None)
    if where is not None:
        problems += [SpecIssue(loc, msg) for loc, msg in missing_site_files(spec.site, where)]
    if problems:
        issues = [SpecIssue(i.loc, i.message, i.node, _line_for(lines, i.loc)) for i in problems]
        raise SpecError(_dedupe(issues), filename)
    return spec


def _dedupe(issues: list[SpecIssue]) -> list[SpecIssue]:
    seen: set[tuple[Loc, str]] = set()
    out = []
    for issue in issues:
        if (issue.loc, issue.message) not in seen:
            seen.add((issue.loc, issue.message))
            out.append(issue)
    return sorted(out, key=lambda i: (i.line or 0, i.path))


def load_spec(path: str | Path) -> Spec:
    """Load and check a spec file."""
    p = Path(path)
    try:
        if p.is_file() and p.stat().st_size > MAX_SPEC_BYTES:
            raise SpecError([SpecIssue((), f"refused: the file is larger than {MAX_SPEC_BYTES // 2**20} MiB")], str(p))
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError([SpecIssue((), f"cannot read spec file: {e.strerror}")], str(path)) from None
    except UnicodeDecodeError as e:
        raise SpecError([SpecIssue((), f"not a UTF-8 text file (byte {e.start}: {e.reason})")], str(path)) from None
    return parse_spec(text, str(path))


def spec_json_schema() -> dict[str, Any]:
    """The JSON Schema of spec files (with each field's x-update-policy)."""
    schema = Spec.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
