"""``--help`` as an operator reads it: flags and counts show no value (``-v 2`` is not a thing),
and help text is never hard-wrapped (a pipe gets whole lines; the terminal or pager wraps)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from gpuforge import cli_reference
from gpuforge.cli import app
from tests.conftest import REPO

COMMANDS = [name.split()[1:] for name, _ in cli_reference.commands(typer.main.get_command(app))]


def _help(words: list[str]) -> str:
    res = CliRunner().invoke(app, [*words, "--help"])
    assert res.exit_code == 0, res.output
    return res.output


def _option_lines(text: str) -> dict[str, str]:
    """Each option's line of the help, by its first name (``-v, --verbose`` -> ``-v``)."""
    found = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("-"):
            found[stripped.split()[0].rstrip(",")] = stripped
    return found


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_flags_and_counts_show_no_value(words: list[str]) -> None:
    text = _help(words)
    assert "<bool>" not in text
    command: Any = typer.main.get_command(app)
    for word in words:
        command = command.commands[word]
    lines = _option_lines(text)
    for param in command.params:
        if param.param_type_name == "option" and (param.is_flag or param.count) and param.opts[0] in lines:
            written = lines[param.opts[0]]
            names = written.split("  ")[0]
            assert "<" not in names, f"{' '.join(words)}: {written}"


def test_verbose_is_shown_without_a_value_and_repeats() -> None:
    line = _option_lines(_help(["plan"]))["-v"]
    assert line.startswith("-v, --verbose ") and "<int>" not in line


def test_help_through_a_pipe_keeps_each_paragraph_on_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    cp = subprocess.run(
        [sys.executable, "-m", "gpuforge", "apply", "--help"],
        capture_output=True, text=True, env=env, cwd=REPO, stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert any(
        "Exit status: 0 converged; 1 a node failed; 2 bad input, a refused change or a declined confirmation "
        "(nothing touched); 3 converged except nodes left for an operator" in line
        for line in lines
    ), cp.stdout
    assert not any(line.startswith(("╭", "│")) for line in lines)  # no 80-column boxes in a pipe
    verbose = next(line for line in lines if line.strip().startswith("-v, --verbose"))
    assert "-vv the commands run on the nodes and the facts read, -vvv the SSH connections too" in verbose


def test_the_reference_keeps_paragraphs_apart() -> None:
    """Two paragraphs of a command's help are two Markdown paragraphs (a blank line between)."""
    text = cli_reference.reference()
    assert (
        "Check the running cluster against the spec: hardware, driver, scheduler, jobs, monitoring, security.\n\n"
        "Exit status: 0 every check passed" in text
    )
