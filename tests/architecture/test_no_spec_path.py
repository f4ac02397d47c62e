"""One loaded cluster, passed down: below the command line no function takes the spec file's path.

The command line (``gpuforge/cli*.py``, a folder's ``cli.py`` or ``*_cli.py``) loads the spec once
(:func:`gpuforge.spec.cluster.load_cluster`, or :meth:`~gpuforge.spec.cluster.Cluster.of` for a spec
it loaded) and hands the :class:`~gpuforge.spec.cluster.Cluster` down; only the loader itself works
from the path (the facts file beside the spec).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.architecture.imports import REPO

#: The loader's own functions: the facts file beside the spec is found from the spec's path.
LOADER = {"gpuforge/spec/discovered.py:facts_path", "gpuforge/spec/discovered.py:apply_discovered"}


def is_command_line(path: Path) -> bool:
    return path.name.startswith("cli") or path.name.endswith("_cli.py")


def taking_spec_path(root: Path) -> list[str]:
    """``file:function`` of every function under ``root/gpuforge`` below the command line with a
    ``spec_path`` parameter."""
    found = []
    for path in sorted((root / "gpuforge").rglob("*.py")):
        if is_command_line(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                if "spec_path" in [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]:
                    name = getattr(node, "name", "<lambda>")
                    found.append(f"{path.relative_to(root).as_posix()}:{name}")
    return found


def test_no_function_below_the_command_line_takes_the_spec_path() -> None:
    assert [f for f in taking_spec_path(REPO) if f not in LOADER] == []


def test_the_walk_finds_a_function_taking_the_spec_path(tmp_path: Path) -> None:
    """The walk itself: a module below the command line with such a function is found, a cli one is not."""
    (tmp_path / "gpuforge" / "orchestrate").mkdir(parents=True)
    (tmp_path / "gpuforge" / "orchestrate" / "x.py").write_text("def run(spec, *, spec_path):\n    pass\n")
    (tmp_path / "gpuforge" / "cli_x.py").write_text("def cmd(spec_path):\n    pass\n")
    assert taking_spec_path(tmp_path) == ["gpuforge/orchestrate/x.py:run"]
