"""scripts/coverage_reach.py: which folders' test calls may run untraced, read from per-test contexts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import coverage

REPO = Path(__file__).resolve().parents[2]


def write_data(path: Path, lines_by_context: dict[str, list[int]]) -> None:
    data = coverage.CoverageData(basename=str(path))
    for context, lines in lines_by_context.items():
        data.set_context(context)
        data.add_lines({"/src/gpuforge/deploy/x.py": lines})
    data.write()


def reach(path: Path) -> subprocess.CompletedProcess[str]:
    script = REPO / "scripts" / "coverage_reach.py"
    return subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True, cwd=REPO)


def test_a_line_only_an_untraced_folders_call_covers_is_named(tmp_path: Path) -> None:
    path = tmp_path / ".coverage"
    write_data(path, {
        "tests/converge/test_a.py::test_one|run": [1, 2],
        "tests/spec/test_b.py::test_two|run": [2, 3],  # 3: only a NOT_MEASURED folder's call
        "tests/spec/test_b.py::test_three|setup": [4],  # a setup stays measured
    })  # fmt: skip
    cp = reach(path)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "/src/gpuforge/deploy/x.py:3" in cp.stdout and ":4" not in cp.stdout, cp.stdout
    assert "spec                      2 lines,     1 only from its calls" in cp.stdout, cp.stdout


def test_nothing_lost_is_exit_0(tmp_path: Path) -> None:
    path = tmp_path / ".coverage"
    write_data(path, {"tests/converge/test_a.py::test_one|run": [1, 2], "tests/spec/test_b.py::test_two|run": [2]})
    cp = reach(path)
    assert cp.returncode == 0 and "cover: 0" in cp.stdout, cp.stdout + cp.stderr
