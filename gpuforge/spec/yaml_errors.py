"""A YAML syntax error as a person reads it: line, column, the offending line quoted, and a hint."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from gpuforge.spec.redact import redact_url_credentials, redact_webhook_urls

#: How much of an offending line is quoted (the file has the rest, at the line given).
QUOTED_CHARS = 100

#: (words in the parser's problem, words in its context or "", the hint shown).
_HINTS: tuple[tuple[str, str, str], ...] = (
    ("mapping values are not allowed", "", "a line indented deeper than the key above it, or a value holding ': ' "
     "(quote the value)"),
    ("did not find expected ',' or ']'", "", "a '[' that is not closed with ']'"),
    ("did not find expected ',' or '}'", "", "a '{' that is not closed with '}'"),
    ("did not find expected key", "", "a line indented less than the block it belongs to (the keys of one "
     "mapping, and the '-' items of one list, line up)"),
    ("did not find expected '-'", "", "the '-' items of one list line up"),
    ("unexpected end of stream", "quoted scalar", "a quote that is not closed"),
    ("could not find expected ':'", "", "a key without ': ' after it, or a quote that is not closed"),
    ("found undefined alias", "", "an alias (*name) needs an anchor (&name) before it"),
    ("another document", "", "a spec is one YAML document: remove the '---' line"),
    ("unknown escape character", "", "inside double quotes a backslash starts an escape: use single quotes"),
)  # fmt: skip


@dataclass(frozen=True)
class YamlProblem:
    """What :func:`describe` makes of a parser error: the message and where (1-based, when known)."""

    message: str
    line: int | None
    column: int | None


def quoted_line(text: str, line: int) -> str:
    """Line ``line`` (1-based) of ``text`` quoted with ``repr`` (a tab shows as ``\\t``), cut to
    :data:`QUOTED_CHARS`, with credentials in URLs (and webhook URL paths) hidden."""
    lines = text.splitlines()
    shown = lines[line - 1] if 0 < line <= len(lines) else ""
    if len(shown) > QUOTED_CHARS:
        shown = shown[:QUOTED_CHARS] + "..."
    return repr(redact_webhook_urls(redact_url_credentials(shown)))


#: A plain value with brackets in it, as a hostlist is written (``gpu[01-04]``, ``gpu[01-02]-ib``).
_BRACKETED = re.compile(r"[^\s,:{}\[\]]*(?:\[[^\s\[\]]*\][^\s,:{}\[\]]*)+")  # no nested '[': linear


def _flow_bracket_hint(text: str, mark: Any) -> str:
    """Inside ``{...}`` or ``[...]`` an unquoted value ends at a '[': a hostlist there must be quoted
    (the parser then reports a '{' or '[' that is not closed, which is not the mistake)."""
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    col = mark.column
    if line[col : col + 1] != "[" or col == 0 or line[col - 1] in " \t,:{[":
        return ""
    start = max(line.rfind(c, 0, col) for c in " \t,{[") + 1
    shown = line[start : start + QUOTED_CHARS]  # a hostile line may be megabytes long
    m = _BRACKETED.match(shown)
    value = m.group(0) if m else shown[: col + 1 - start]
    return (
        f"inside {{...}} or [...] an unquoted value ends at '[', so a hostlist there must be quoted: "
        f"{value!r} (or write the mapping in block style, one key per line)"
    )


def _hint(problem: str, context: str, text: str, mark: Any) -> str:
    if "flow" in context and mark is not None:
        flow = _flow_bracket_hint(text, mark)
        if flow:
            return flow
    if "cannot start any token" in problem and mark is not None:
        lines = text.splitlines()
        char = lines[mark.line][mark.column : mark.column + 1] if mark.line < len(lines) else ""
        if char == "\t":
            return "YAML indents with spaces, not tabs"
        if char in ("@", "`", "%"):
            return f"a value starting with {char!r} must be quoted"
        return ""
    for words, context_words, hint in _HINTS:
        if words in problem and context_words in context:
            return hint
    return ""


def describe(error: yaml.YAMLError, text: str) -> YamlProblem:
    """``error`` with its line and column, the offending line quoted, where the construct it is in
    started (an unclosed ``[`` opened lines before), and a hint for the common mistakes."""
    problem = str(getattr(error, "problem", None) or error)
    context = str(getattr(error, "context", None) or "")
    mark = getattr(error, "problem_mark", None)
    if mark is None:
        return YamlProblem(f"not valid YAML: {redact_url_credentials(problem)}", None, None)
    line, column = mark.line + 1, mark.column + 1
    if line > len(text.splitlines()):
        message = f"not valid YAML: {problem} at the end of the file (line {line})"
    else:
        message = f"not valid YAML: {problem} at line {line}, column {column}: {quoted_line(text, line)}"
    started = getattr(error, "context_mark", None)
    if context and started is not None and (started.line, started.column) != (mark.line, mark.column):
        where = f"line {started.line + 1}, column {started.column + 1}"
        quoted = f": {quoted_line(text, started.line + 1)}" if started.line != mark.line else ""
        message += f" ({context} started at {where}{quoted})"
    hint = _hint(problem, context, text, mark)
    if hint:
        message += f"; hint: {hint}"
    if line > len(text.splitlines()) and started is not None:  # past the end: point at what is left open
        line, column = started.line + 1, started.column + 1
    return YamlProblem(redact_url_credentials(message), line, column)
