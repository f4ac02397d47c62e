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


#: The calls that read a spec file from disk.
READERS = {"load_cluster", "load_spec", "load_spec_and_text", "read_spec_text", "load_or_exit", "spec_of_text"}
#: Below the command line, the two places that read a spec file, each the start of its own command:
#: the deploys under the plain ``pyinfra`` CLI (no gpuforge command loaded it), and the image build's
#: reading back of the fitted spec it wrote itself (another file).
READ_ELSEWHERE = {"gpuforge/deploy/context.py:load_spec", "gpuforge/image/build.py:load_cluster"}


def reading_a_spec(root: Path) -> list[str]:
    """``file:call`` of every call of a spec reader under ``root/gpuforge`` below the command line
    (the loader's own module and the Cluster's aside)."""
    found = []
    for path in sorted((root / "gpuforge").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if is_command_line(path) or rel in ("gpuforge/spec/load.py", "gpuforge/spec/cluster.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in READERS:
                    found.append(f"{rel}:{name}")
    return found


def test_below_the_command_line_nothing_reads_the_spec_file() -> None:
    """With the open counts of plan, apply, validate and accept (tests/cli/test_spec_read_once.py), this
    keeps every other command (image build, slurm-build, slurm-upgrade) at the one read its CLI does."""
    assert sorted(set(reading_a_spec(REPO))) == sorted(READ_ELSEWHERE)


def test_the_walk_finds_a_spec_read(tmp_path: Path) -> None:
    (tmp_path / "gpuforge" / "orchestrate").mkdir(parents=True)
    (tmp_path / "gpuforge" / "orchestrate" / "x.py").write_text("def run(c):\n    return load_spec(c.path)\n")
    (tmp_path / "gpuforge" / "orchestrate" / "x_cli.py").write_text("def main(p):\n    return load_cluster(p)\n")
    assert reading_a_spec(tmp_path) == ["gpuforge/orchestrate/x.py:load_spec"]
