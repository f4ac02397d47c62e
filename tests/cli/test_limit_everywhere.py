"""``--limit`` is one selector with one parser and one error in every command that takes it (the
review found render writing 0 files for a role, inventory and accept --plan printing nothing, validate
refusing '!', and render exiting 0 for an unknown node where plan exits 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuforge import cli
from tests.helpers import INVENTORIES

H100 = str(INVENTORIES / "slurm-h100.yaml")


def run(*args: str) -> tuple[int, str, str]:
    got = CliRunner().invoke(cli.app, list(args))
    return got.exit_code, got.stdout, got.stderr


@pytest.mark.parametrize(
    "command",
    [["render", H100, "-o", "{tmp}"], ["inventory", H100], ["accept", H100, "--plan"], ["validate", H100],
     ["plan", H100], ["apply", H100, "--yes"]],
    ids=["render", "inventory", "accept", "validate", "plan", "apply"],
)  # fmt: skip
def test_a_limit_naming_no_node_is_exit_2_with_the_same_message(command: list[str], tmp_path: Path) -> None:
    argv = [a.replace("{tmp}", str(tmp_path / "out")) for a in command]
    code, out, err = run(*argv, "--limit", "gpu99")
    assert code == 2, (out, err)
    assert "--limit: 'gpu99' matches no node of the spec; node groups: ctl, db, login, mon, gpu, mig" in err
    assert not (tmp_path / "out").exists()


def test_render_takes_roles_and_exclusions(tmp_path: Path) -> None:
    code, _, err = run("render", H100, "-o", str(tmp_path), "--limit", "compute,!gpu[002-063]")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["gpu001", "gpu064"]


def test_inventory_takes_a_role() -> None:
    code, out, err = run("inventory", H100, "--limit", "login")
    assert code == 0, err
    hosts = json.loads(out)["all"]["hosts"]
    assert list(hosts) == ["login01", "login02"]


def test_accept_plan_takes_a_role_and_an_exclusion() -> None:
    code, out, err = run("accept", H100, "--plan", "--limit", "compute,!gpu[002-063]")
    assert code == 0, err
    assert "gpu001" in out and "gpu064" in out
    assert "gpu002" not in out and "gpu063" not in out
