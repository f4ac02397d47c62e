"""The conventions an operator reaches for: ``--version``, shell completion, ``validate
--list-checks``, help text on every ``--json`` option."""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
import sys
from typing import Any

import pytest
import typer.main

from gpuforge import __version__
from gpuforge.cli import app
from gpuforge.validator.registry import ALL_CHECKS
from tests.conftest import REPO, run_cli


def test_version_names_the_package_and_python() -> None:
    cp = run_cli("--version")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == f"gpuforge {__version__} (Python {platform.python_version()})\n"


def test_show_completion_prints_the_bash_script() -> None:
    # typer names the shell from the parent processes (shellingham), not from an argument: run it
    # under bash (the "; true" keeps bash from exec'ing it), as a user's shell would, wherever pytest runs.
    cp = subprocess.run(
        ["bash", "-c", f"{shlex.quote(sys.executable)} -m gpuforge --show-completion; true"],
        capture_output=True, text=True, timeout=120, cwd=REPO, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert cp.returncode == 0 and not cp.stderr, cp.stderr
    assert "_gpuforge_completion()" in cp.stdout
    assert "complete -o default -F _gpuforge_completion gpuforge" in cp.stdout
    assert "_GPUFORGE_COMPLETE=complete_bash" in cp.stdout


@pytest.mark.parametrize(
    ("words", "cword", "wanted"),
    [
        ("gpuforge pl", 1, "plan"),
        ("gpuforge apply --all", 2, "--allow-reboot"),
        ("gpuforge validate --li", 2, "--limit"),
    ],
)
def test_bash_completion_completes_commands_and_options(words: str, cword: int, wanted: str) -> None:
    """What the installed bash function runs: the program with the completion variables set."""
    env = {**os.environ, "_GPUFORGE_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    code = "import sys; sys.argv = ['gpuforge']; from gpuforge.__main__ import main; main()"
    cp = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert wanted in cp.stdout.split(), cp.stdout + cp.stderr


def test_list_checks_prints_every_check_id_and_needs_no_spec() -> None:
    cp = run_cli("validate", "--list-checks")
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert lines[0].split() == ["id", "layer", "severity", "description"]
    listed = [line.split()[0] for line in lines[1:-1]]
    assert listed == [c.id for c in ALL_CHECKS]
    by_id = {line.split()[0]: line for line in lines[1:-1]}
    ssh = next(c for c in ALL_CHECKS if c.id == "connection.ssh")
    assert by_id["connection.ssh"].endswith(ssh.description)
    assert lines[-1].startswith("--checks takes ids, id prefixes (driver, driver.*) and layers: connection, hardware")


def _commands(group: Any, prefix: str = "gpuforge") -> list[tuple[str, Any]]:
    """Every command under ``group`` (typer's click: groups have ``commands``), with its full name."""
    found = [(prefix, group)]
    for name, sub in getattr(group, "commands", {}).items():
        found += _commands(sub, f"{prefix} {name}")
    return found


def _options(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option" and p.name != "help"]


def test_every_json_option_has_help() -> None:
    root = typer.main.get_command(app)
    with_json = []
    for name, command in _commands(root):
        for param in _options(command):
            if "--json" in param.opts:
                with_json.append(name)
                assert param.help, f"{name} --json has no help"
    assert {"gpuforge check", "gpuforge plan", "gpuforge apply", "gpuforge validate", "gpuforge log"} <= set(with_json)


def test_every_option_of_plan_apply_and_validate_has_help() -> None:
    commands = dict(_commands(typer.main.get_command(app)))
    for name in ("plan", "apply", "validate"):
        for param in _options(commands[f"gpuforge {name}"]):
            assert param.help and not re.search(r"\s$", param.help), f"{name} {param.opts}"
