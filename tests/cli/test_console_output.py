"""Output through a pipe: full width and as written (the review saw `check ... | cat` split its OK
line at 80 columns, validate's headers cut to `con… har…`, and `file.yaml:100:` turned into an emoji)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.table import Table

from gpuforge.console import PIPE_WIDTH, console

REPO = Path(__file__).resolve().parents[2]


def test_check_through_a_pipe_keeps_its_line_whole_and_emoji_codes_literal(tmp_path: Path) -> None:
    deep = tmp_path / ("a-folder-name-long-enough-to-pass-eighty-columns-" * 2)
    deep.mkdir()
    spec = deep / "site:100:.yaml"
    shutil.copy(REPO / "inventories" / "slurm-h100.yaml", spec)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    got = subprocess.run([sys.executable, "-m", "gpuforge", "check", str(spec)], capture_output=True, text=True,
                         env=env, timeout=120)  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert got.stdout == f"{spec}: OK (slurm cluster 'hopper', 69 nodes)\n"


def test_a_table_through_a_pipe_is_not_cut(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    table = Table("connection", "hardware", "configuration", "driver", "toolkit", "container", "scheduler")
    table.add_row(*(["passed (every node answered in time)"] * 7))
    out = console()
    assert out.width == PIPE_WIDTH
    out.print(table)
    printed = capsys.readouterr().out
    assert "…" not in printed
    assert "connection" in printed and "scheduler" in printed
    assert max(len(line) for line in printed.splitlines()) > 80


def test_columns_still_rules_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "132")
    assert console().width == 132
    assert console(stderr=True).width == 132
