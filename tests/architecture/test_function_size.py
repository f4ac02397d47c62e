"""No function of the package, its thin entry points or the benchmarks is longer than 80 lines.

A function that long does several things; split it into named parts (the style guide's rule).
Counted from ``def`` to the last line of the body, docstring included, as ``ast`` reports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 80


def long_functions(root: Path, base: Path = REPO) -> list[str]:
    """``path:line name (N lines)`` of each function under ``root`` longer than the limit."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                if length > LIMIT:
                    found.append(f"{path.relative_to(base)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_longer_than_80_lines() -> None:
    found = long_functions(REPO / "gpuforge") + long_functions(REPO / "deploys") + long_functions(REPO / "bench")
    assert not found, "functions over 80 lines:\n" + "\n".join(found)


def test_the_check_finds_a_long_function(tmp_path: Path) -> None:
    """The counter itself: a 81-line function is reported, an 80-line one is not."""
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    (tmp_path / "ok.py").write_text(f"def fits():\n{body}\n")
    (tmp_path / "long.py").write_text(f"def too_long():\n{body}\n    return 1\n")
    assert long_functions(tmp_path, tmp_path) == ["long.py:1 too_long (81 lines)"]
