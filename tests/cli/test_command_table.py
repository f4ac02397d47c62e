"""``gpuforge.cli.COMMANDS`` is the table of contents of the command line: every command ``gpuforge
--help`` lists comes from it, in its order, and ``gpuforge/cli.py`` defines no command itself."""

from __future__ import annotations

import ast

from typer.testing import CliRunner

from gpuforge.cli import COMMANDS, app
from tests.conftest import REPO


def _listed_in_help() -> list[str]:
    """The command names under ``Commands:`` in ``gpuforge --help``, in their order."""
    res = CliRunner().invoke(app, ["--help"])
    assert res.exit_code == 0, res.output
    section = res.output.split("\nCommands:\n", 1)[1]
    return [line.split()[0] for line in section.splitlines() if line.startswith("  ") and line.strip()]


def test_help_lists_the_table_in_its_order() -> None:
    assert _listed_in_help() == [name for name, _ in COMMANDS]


def test_every_command_of_the_app_is_in_the_table() -> None:
    registered = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    assert sorted(n or "" for n in registered) == sorted(name for name, _ in COMMANDS)


def test_cli_py_holds_no_command_body() -> None:
    """Its functions are the app's own (version, callback, registration, signals, main): a command's
    body lives in the module the table names."""
    tree = ast.parse((REPO / "gpuforge" / "cli.py").read_text())
    functions = sorted(n.name for n in tree.body if isinstance(n, ast.FunctionDef))
    assert functions == [
        "__getattr__",
        "_interrupted",
        "_load",
        "_main",
        "_new_app",
        "_register",
        "_show_version",
        "main",
        "version_text",
    ]
