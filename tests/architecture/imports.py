"""The import graph of the package, read from the source (AST), with no module executed."""

from __future__ import annotations

import ast
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    top_level: bool
    """At module level (runs at import time), not inside a function."""
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    files = [*sorted((REPO / "gpuforge").rglob("*.py")), *sorted((REPO / "deploys").glob("*.py"))]
    return {module_name(p): p for p in files}


def imports_of(name: str, path: Path, modules: Collection[str]) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                found.extend(Import(name, a.name, top, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    module = ".".join([*base, child.module] if child.module else base)
                else:
                    module = child.module or ""
                if module == "__future__":
                    continue
                # ``from pkg import mod`` depends on the submodule; ``from mod import name`` on the module
                for a in child.names:
                    sub = f"{module}.{a.name}"
                    found.append(Import(name, sub if sub in modules else module, top, child.lineno))
            visit(child, inner)

    visit(tree, True)
    return found


def graph() -> list[Import]:
    """Every import of every module: of the package's own modules (those that exist), of others."""
    mods = source_modules()
    edges = []
    for name, path in mods.items():
        for imp in imports_of(name, path, mods):
            if imp.imported.startswith(("gpuforge", "deploys")) and imp.imported not in mods:
                continue  # a gpuforge name that is no module (resolved to its module above)
            edges.append(imp)
    return edges


def room(module: str) -> str:
    """The folder a module lives in: ``spec``, ``render``, ``deploy``, ...; ``cli`` for the CLI and
    its entry point (``gpuforge.__main__``), ``entry`` for the thin ``deploys/`` entry points."""
    parts = module.split(".")
    if parts[0] == "deploys":
        return "entry"
    if parts[1:] == ["__main__"] or (len(parts) == 2 and parts[1].startswith("cli_")):
        return "cli"  # the CLI, its entry point and its helpers (gpuforge.cli_render, gpuforge.cli_reference)
    if len(parts) == 1:
        return "package"
    return parts[1]
