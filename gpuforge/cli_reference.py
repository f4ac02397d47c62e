"""The command reference in docs/cli.md, generated from the CLI itself so that it cannot drift.

``python -m gpuforge.cli_reference`` prints it; ``--write docs/cli.md`` replaces the part of that
file between ``BEGIN`` and ``END`` (the prose around it is kept). Every command and sub-command,
its arguments and options, their help text and defaults come from the Typer/Click objects the
``gpuforge`` command runs; ``tests/docs/test_cli_reference.py`` fails when the file is stale.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer.main

from gpuforge.cli import app

BEGIN = "<!-- BEGIN generated command reference: python -m gpuforge.cli_reference --write docs/cli.md -->"
END = "<!-- END generated command reference -->"


def commands(group: Any, prefix: str = "gpuforge") -> Iterator[tuple[str, Any]]:
    """``(full name, command)`` for every command under ``group`` (a Click group as Typer builds it),
    depth first, in name order."""
    for name in sorted(group.commands):
        cmd = group.commands[name]
        if getattr(cmd, "hidden", False):
            continue
        full = f"{prefix} {name}"
        if hasattr(cmd, "commands"):
            yield from commands(cmd, full)
        else:
            yield full, cmd


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _is_argument(param: Any) -> bool:
    return bool(param.param_type_name == "argument")


def _takes_no_value(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False) or getattr(param, "count", False))


def _metavar(param: Any) -> str:
    if _takes_no_value(param):
        return ""
    return str(param.metavar or param.name.upper())


def _default(param: Any) -> str:
    default = param.default
    if _takes_no_value(param) and not default:
        return ""
    if default is None or default == () or callable(default):
        return ""
    return f"`{default}`"


def param_row(param: Any) -> str:
    """One table row: how the parameter is written, what it means, its default."""
    if _is_argument(param):
        written = f"`{param.name.upper()}`" + ("" if param.required else " (optional)")
    else:
        names = ", ".join([*param.opts, *param.secondary_opts])
        meta = _metavar(param)
        written = f"`{names}{' ' + meta if meta else ''}`"
        if getattr(param, "count", False):
            written += " (repeatable)"
    help_text = getattr(param, "help", None) or ""
    return f"| {written} | {_cell(help_text)} | {_default(param)} |"


def command_section(name: str, cmd: Any) -> list[str]:
    """The Markdown of one command: heading, usage, help text, parameter table."""
    shown = [p for p in cmd.params if not getattr(p, "hidden", False) and p.name != "help"]
    args = " ".join(p.name.upper() if p.required else f"[{p.name.upper()}]" for p in shown if _is_argument(p))
    lines = [f"### `{name}`", "", f"`{name} [OPTIONS]{' ' + args if args else ''}`", ""]
    if cmd.help:
        for paragraph in cmd.help.strip().split("\n\n"):  # one line each: the reader's screen wraps
            lines += [" ".join(paragraph.split()), ""]
    if shown:
        lines += ["| argument or option | meaning | default |", "|---|---|---|"]
        lines += [param_row(p) for p in shown]
        lines.append("")
    return lines


def reference() -> str:
    """The whole generated part (without the markers)."""
    root = typer.main.get_command(app)
    lines = ["## Command reference", ""]
    for name, cmd in commands(root):
        lines += command_section(name, cmd)
    return "\n".join(lines).rstrip() + "\n"


def spliced(document: str, generated: str) -> str:
    """``document`` with the text between the markers replaced by ``generated`` (markers appended if absent)."""
    if BEGIN in document and END in document:
        head, rest = document.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        return f"{head}{BEGIN}\n{generated}{END}{tail}"
    return f"{document.rstrip()}\n\n{BEGIN}\n{generated}{END}\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write"] and len(argv) == 2:
        path = Path(argv[1])
        path.write_text(spliced(path.read_text(), reference()))
        return 0
    if argv:
        print("usage: python -m gpuforge.cli_reference [--write docs/cli.md]", file=sys.stderr)
        return 2
    sys.stdout.write(reference())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
