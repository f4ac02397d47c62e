"""Load a spec file: YAML -> pydantic model -> cross-field rules, all problems at once."""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gpuforge.spec import safe_yaml, yaml_errors
from gpuforge.spec.bounded_read import InputFileError, read_regular_file
from gpuforge.spec.bounds import count_problems
from gpuforge.spec.errors import Loc, SpecError, SpecIssue
from gpuforge.spec.extensions import missing_site_files
from gpuforge.spec.limits import FILE_BYTES
from gpuforge.spec.model import DRIVER_VERSION, NAME, SCHEDULER_ROLES, SLURM_TIME, VERSION, Scheduler, Spec
from gpuforge.spec.redact import redact_url_credentials
from gpuforge.spec.rules import check_rules
from gpuforge.spec.suggest import did_you_mean, enum_hint, expected_values, role_hint

#: How much of a refused value a problem repeats (the file has the rest, at the line given).
SHOWN_CHARS = 120

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


def _scheduler_roles(data: dict[Any, Any]) -> tuple[str, list[str]] | None:
    """The file's scheduler and its roles (None: no valid ``cluster.scheduler`` to go by)."""
    cluster = data.get("cluster")
    value = cluster.get("scheduler") if isinstance(cluster, dict) else None
    if not isinstance(value, str) or value not in set(Scheduler):
        return None
    return value, [r.value for r in SCHEDULER_ROLES[Scheduler(value)]]


def _is_role(loc: Loc) -> bool:
    """``node_groups[i].roles[j]``."""
    return len(loc) == 4 and loc[0] == "node_groups" and loc[2] == "roles"


def _number_hint(value: object, shown: str | None) -> str:
    """What to write for a number where text is wanted: YAML read the unquoted value as a number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or shown is None:
        return ""
    lost = " (as a number, trailing zeros are lost: 12.10 reads as 12.1)" if isinstance(value, float) else ""
    return f'YAML reads an unquoted {shown} as a number: quote it, "{shown}"{lost}'


def _issue_from_pydantic(err: Any, lines: dict[Loc, int], scheduler: tuple[str, list[str]] | None = None) -> SpecIssue:
    kind = err["type"]
    raw: Loc = tuple(err["loc"])
    # Drop pydantic's union branch tags ("str", "function-after[...]"); an unknown key is the file's own.
    kept = raw[:-1] if kind == "extra_forbidden" else raw
    loc: Loc = tuple(p for p in kept if not (isinstance(p, str) and ("[" in p or p in ("str", "int"))))
    loc += raw[-1:] if kind == "extra_forbidden" else ()
    msg = str(err["msg"])
    if kind == "extra_forbidden" and loc:
        parent = _model_at(loc[:-1])
        allowed = sorted(parent.model_fields) if parent else []
        close = did_you_mean(str(loc[-1]), allowed)
        hint = f"; {close}" if close else ""
        msg = f"unknown field{hint} allowed here: {', '.join(allowed)}"
    elif kind == "missing":
        msg = "required field is missing"
    elif kind == "string_pattern_mismatch":
        pattern = err.get("ctx", {}).get("pattern", "")
        msg = PATTERN_HELP.get(pattern, f"must match {pattern}")
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    shown = _shown(err["input"]) if "input" in err and not isinstance(err["input"], dict | list) else None
    if kind not in ("extra_forbidden", "missing") and shown is not None and shown not in msg:
        msg = f"{msg} (got {shown})"
    if kind in ("enum", "literal_error"):
        if scheduler is not None and _is_role(loc):
            hint = role_hint(err.get("input"), *scheduler)
        else:
            hint = enum_hint(err.get("input"), expected_values(str(err.get("ctx", {}).get("expected", ""))))
        msg = f"{msg}; {hint}" if hint else msg
    elif kind == "string_type":
        hint = _number_hint(err.get("input"), shown)
        msg = f"{msg}; {hint}" if hint else msg
    return SpecIssue(loc, _shorten(redact_url_credentials(msg)), line=_line_for(lines, loc))


def _shown(value: Any) -> str | None:
    """``repr(value)`` cut to :data:`SHOWN_CHARS` (None: it cannot be written, a number too long)."""
    try:
        text = repr(value)
    except ValueError:
        return None
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text):,} characters)"


def _shorten(message: str) -> str:
    """A message that repeats a long value, cut to a readable length (the line number finds the rest)."""
    limit = 4 * SHOWN_CHARS
    return message if len(message) <= limit else f"{message[:limit]}... (cut: {len(message):,} characters)"


def parse_spec(
    text: str, filename: str | None = None, base_dir: Path | None = None, waive: frozenset[Loc] = frozenset()
) -> Spec:
    """Parse and check spec text; raise SpecError listing every problem (but the cross-field rules'
    problems at a path in ``waive``: ``UNPINNED_BUNDLE`` for ``gpuforge bundle``).

    Every limit (``gpuforge.spec.limits``) is checked before the work it bounds: the YAML while it
    is parsed, the counts of nodes, accounts and partitions before any field is validated. Site
    paths (``site.*``) are relative to ``base_dir`` (default: the file's folder) and must be there;
    text with neither (an apply record) is not checked for them.
    """
    data, lines = _parse_yaml(text, filename)
    if not isinstance(data, dict):
        raise SpecError([SpecIssue((), "a spec is a YAML mapping with at least 'cluster' and 'node_groups'")], filename)
    over = count_problems(data)
    if over:
        raise SpecError([SpecIssue(loc, msg, line=_line_for(lines, loc)) for loc, msg in over], filename)
    try:
        spec = Spec.model_validate(data)
    except ValidationError as e:
        issues = [_issue_from_pydantic(err, lines, _scheduler_roles(data)) for err in e.errors()]
        raise SpecError(_dedupe(issues), filename) from None
    problems = [p for p in check_rules(spec) if p.loc not in waive]
    where = base_dir or (Path(filename).parent if filename else None)
    if where is not None:
        problems += [SpecIssue(loc, msg) for loc, msg in missing_site_files(spec.site, where)]
    if problems:
        issues = [SpecIssue(i.loc, i.message, i.node, _line_for(lines, i.loc)) for i in problems]
        raise SpecError(_dedupe(issues), filename)
    return spec


def _parse_yaml(text: str, filename: str | None) -> tuple[Any, dict[Loc, int]]:
    """The YAML data of ``text`` and each path's line; a SpecError for text over a limit or not YAML."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > FILE_BYTES.value:
        raise SpecError([SpecIssue((), FILE_BYTES.refusal(size))], filename)
    try:
        return safe_yaml.load(text)
    except safe_yaml.LimitError as e:
        raise SpecError([SpecIssue((), e.message, line=e.line)], filename) from None
    except yaml.YAMLError as e:
        problem = yaml_errors.describe(e, text)
        issue = SpecIssue((), _shorten(problem.message), line=problem.line, column=problem.column)
        raise SpecError([issue], filename) from None


def _dedupe(issues: list[SpecIssue]) -> list[SpecIssue]:
    seen: set[tuple[Loc, str]] = set()
    out = []
    for issue in issues:
        if (issue.loc, issue.message) not in seen:
            seen.add((issue.loc, issue.message))
            out.append(issue)
    return sorted(out, key=lambda i: (i.line or 0, i.path))


#: What ``gpuforge bundle`` waives: an offline spec's ``sources.bundle_fingerprint`` is the key the
#: bundle build prints, so the build cannot need it (everything else is checked as always).
UNPINNED_BUNDLE: frozenset[Loc] = frozenset({("sources", "bundle_fingerprint")})


def load_spec(path: str | Path, waive: frozenset[Loc] = frozenset()) -> Spec:
    """Load and check a spec file (a regular file within the size limit, read only then), with its
    ``discover: true`` groups' figures from the facts file beside it (``gpuforge.spec.discovered``).
    ``waive``: as ``parse_spec``'s."""
    return load_spec_and_text(path, waive)[0]


def load_spec_and_text(path: str | Path, waive: frozenset[Loc] = frozenset()) -> tuple[Spec, str]:
    """:func:`load_spec`, and the file's text as it was read (the one read)."""
    from gpuforge.spec.discovered import apply_discovered

    text = read_spec_text(path)
    return apply_discovered(parse_spec(text, str(path), waive=waive), path), text


def spec_of_text(path: str | Path, data: bytes, waive: frozenset[Loc] = frozenset()) -> tuple[Spec, str]:
    """:func:`load_spec_and_text` for bytes the caller already read from ``path`` (one read)."""
    from gpuforge.spec.discovered import apply_discovered

    text = decode_spec(path, data)
    return apply_discovered(parse_spec(text, str(path), waive=waive), path), text


def load_or_exit(path: str | Path, waive: frozenset[Loc] = frozenset(), data: bytes | None = None) -> Spec:
    """:func:`load_spec` for a command (of ``data``, the file's bytes, when the caller read them): on a
    bad spec, every problem on stderr (no traceback) and exit 2, before anything is touched."""
    import typer

    try:
        return load_spec(path, waive) if data is None else spec_of_text(path, data, waive)[0]
    except SpecError as e:
        print(e.format(), file=sys.stderr)
        raise typer.Exit(2) from None


def read_spec_text(path: str | Path) -> str:
    """The UTF-8 text of a spec file, or a SpecError: only a regular file within the size limit is
    read, both checked on the opened file first (``/dev/zero`` is never read, a FIFO never waited on)."""
    try:
        data = read_regular_file(path, FILE_BYTES)
    except InputFileError as e:
        why = (
            e.why if e.why.startswith("refused") else f"cannot read spec file: {e.why.removeprefix('cannot read it: ')}"
        )
        raise SpecError([SpecIssue((), why)], str(path)) from None
    return decode_spec(path, data)


def decode_spec(path: str | Path, data: bytes) -> str:
    """A spec file's bytes as text, or a SpecError naming the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError([SpecIssue((), f"not a UTF-8 text file (byte {e.start}: {e.reason})")], str(path)) from None


#: How a spec read from standard input is named in errors (``gpuforge check -``).
STDIN_NAME = "<stdin>"


def parse_spec_stream(stream: typing.BinaryIO, base_dir: Path) -> Spec:
    """A spec read from ``stream`` (standard input), named ``<stdin>`` in every error; at most
    the file limit is read (more is refused, not waited for). Site paths are relative to ``base_dir``."""
    data = stream.read(FILE_BYTES.value + 1)
    if len(data) > FILE_BYTES.value:
        raise SpecError([SpecIssue((), FILE_BYTES.refusal())], STDIN_NAME)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError([SpecIssue((), f"not UTF-8 text (byte {e.start}: {e.reason})")], STDIN_NAME) from None
    return parse_spec(text, STDIN_NAME, base_dir=base_dir)


def spec_json_schema() -> dict[str, Any]:
    """The JSON Schema of spec files (with each field's x-update-policy)."""
    schema = Spec.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
