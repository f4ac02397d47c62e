"""The README and docs/ say what is true: their marked command blocks run, the README stays short,
and its two commands are the ones a root shell without sudo runs and ``.ci/run`` runs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.docs.blocks import Block, Command, read_blocks

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCKS = [b for page in PAGES for b in read_blocks(page)]
README_MAX_LINES = 250


def run_block(block: Block, workdir: Path, env: dict[str, str]) -> None:
    """Run the block's commands in order in ``workdir`` (the repository's inventories beside them)."""
    for command in block.commands:
        cp = subprocess.run(
            ["bash", "-c", f"set -o pipefail\n{command.text}"],
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream, in the order a terminal shows it
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        out = cp.stdout
        where = f"{block.id}: $ {command.text.splitlines()[0]}\n{out}"
        assert cp.returncode == command.exit_code, f"exit {cp.returncode}, want {command.exit_code}: {where}"
        check_expected(command, out, where)


def check_expected(command: Command, out: str, where: str) -> None:
    at = 0
    for want in command.expect:
        found = out.find(want, at)
        assert found >= 0, f"{want!r} not printed (after what came before): {where}"
        at = found + len(want)


def doc_env(tmp_path: Path) -> dict[str, str]:
    venv_bin = str(REPO / ".venv" / "bin")
    return {
        **os.environ,
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path / "home"),
        "GPUFORGE_STATE_DIR": str(tmp_path / "state"),
        "COLUMNS": "200",
    }


def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir(parents=True)
    (work / "inventories").symlink_to(REPO / "inventories")
    (tmp_path / "home").mkdir(exist_ok=True)
    return work


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "doctest"], ids=lambda b: b.id)
def test_doc_block(block: Block, tmp_path: Path) -> None:
    run_block(block, workdir(tmp_path), doc_env(tmp_path))


@pytest.mark.lab
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "doctest-lab"], ids=lambda b: b.id)
def test_doc_block_on_the_lab(block: Block, lab_cluster: Any, tmp_path: Path) -> None:
    """``$SPEC`` is the lab's spec (inventories/lab.yaml fitted to the lab's nodes, applied)."""
    env = {**doc_env(tmp_path), **lab_cluster.env, "SPEC": str(lab_cluster.spec_path)}
    run_block(block, workdir(tmp_path), env)


def test_the_docs_have_runnable_blocks() -> None:
    by_page = {b.path.name for b in BLOCKS if b.kind == "doctest"}
    assert {"README.md", "operations.md"} <= by_page, by_page
    assert any(b.kind == "doctest-lab" for b in BLOCKS)
    assert all(b.commands for b in BLOCKS), [b.id for b in BLOCKS if not b.commands]


def test_the_runner_fails_a_wrong_expectation(tmp_path: Path) -> None:
    """The runner itself: a missing line, a wrong exit status and lines out of order all fail."""
    page = tmp_path / "page.md"
    page.write_text("```sh doctest\n$ printf 'a\\nb\\n'\nb\na\n```\n```sh doctest\n$ false  # exit 0\n```\n")
    out_of_order, wrong_exit = read_blocks(page)
    for block in (out_of_order, wrong_exit):
        with pytest.raises(AssertionError):
            run_block(block, workdir(tmp_path / block.id.replace(":", "_")), doc_env(tmp_path))


def test_the_parser_reads_heredocs_and_exit_codes(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```sh doctest\n$ cat > f <<'EOF'\n$ not a command\nEOF\n$ grep x f  # exit 1\n```\n")
    (block,) = read_blocks(page)
    assert [c.text for c in block.commands] == ["cat > f <<'EOF'\n$ not a command\nEOF", "grep x f"]
    assert [c.exit_code for c in block.commands] == [0, 1]


def test_the_readme_is_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"


def readme_commands() -> list[str]:
    """The commands of the README's "The two commands" block (comments and blank lines left out)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## The two commands", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "no sh block under 'The two commands'"
    return [ln for ln in block[1].splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_two_commands_run_as_root_without_sudo_and_ci_runs_the_second() -> None:
    demo, test = readme_commands()
    assert (demo, test) == ("bash scripts/demo.sh", "bash scripts/test.sh")
    for script in ("scripts/demo.sh", "scripts/test.sh", "scripts/setup.sh"):
        text = (REPO / script).read_text()
        assert not re.search(r"^\s*sudo\s", text, re.M), f"{script} calls sudo on a line of its own"
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^exec bash \./scripts/test\.sh\b", ci, re.M), ci
