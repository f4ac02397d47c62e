"""The node-local health check as ONE file: ``nodelocal`` and the shared probes it imports.

Nodes have no gpuforge installed, and ``gpuforge validate`` runs the checker as ``python3 -``
with the program on stdin, so it must be a single file. It is built here from the package's
own modules: their sources are embedded and served by a small importer, then
``gpuforge.validator.nodelocal.main()`` runs. The parsers the checks use are therefore the
same code as the deploy facts' parsers (``gpuforge.probes``), not copies.

The bytes depend only on the sources (sorted, no timestamps): an unchanged program is an
unchanged file on the node, so a re-apply changes nothing.
"""

from __future__ import annotations

import ast
import json
from functools import cache
from importlib.util import find_spec
from pathlib import Path

ENTRY = "gpuforge.validator.nodelocal"
#: Package ``__init__`` modules are embedded empty: the program needs only their submodules.
PACKAGES = ("gpuforge", "gpuforge.probes", "gpuforge.validator", "gpuforge.validator.node")

_BOOTSTRAP = '''#!/usr/bin/env python3
"""gpuforge node health check (built from gpuforge.validator.nodelocal and gpuforge.probes; do not edit)."""
import importlib.abc
import importlib.util
import sys

SOURCES = json.loads(SOURCES_JSON)
PACKAGES = frozenset(PACKAGES_LIST)


class EmbeddedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name not in SOURCES:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=name in PACKAGES)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        code = compile(SOURCES[module.__name__], "<gpuforge:" + module.__name__ + ">", "exec")
        exec(code, module.__dict__)


sys.meta_path.insert(0, EmbeddedModules())
from gpuforge.validator.nodelocal import main  # noqa: E402

sys.exit(main())
'''


def _source(module: str) -> str:
    spec = find_spec(module)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"cannot find the source of {module}")
    return Path(spec.origin).read_text()


def _is_module(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _gpuforge_imports(module: str, source: str) -> set[str]:
    """gpuforge modules ``module`` imports (module level and inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("gpuforge."):
                found.add(node.module)
                # ``from gpuforge.pkg import mod`` imports the submodule ``gpuforge.pkg.mod``
                found.update(f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gpuforge."))
    return found


def embedded_sources() -> dict[str, str]:
    """Module name -> source of every module the node program carries (entry + its closure)."""
    sources: dict[str, str] = dict.fromkeys(PACKAGES, "")
    todo = [ENTRY]
    while todo:
        name = todo.pop()
        if name in sources:
            continue
        sources[name] = _source(name)
        todo.extend(_gpuforge_imports(name, sources[name]) - set(sources))
    return dict(sorted(sources.items()))


@cache
def node_program() -> bytes:
    """The whole node-local checker as one Python file (runs as a script or as ``python3 -``)."""
    sources = embedded_sources()
    header = "import json\n\nSOURCES_JSON = " + repr(json.dumps(sources, sort_keys=True)) + "\n"
    header += "PACKAGES_LIST = " + repr(sorted(PACKAGES)) + "\n"
    shebang, _, rest = _BOOTSTRAP.partition("\n")
    doc_end = rest.index('"""', 3) + 3
    text = shebang + "\n" + rest[:doc_end] + "\n" + header + rest[doc_end:]
    return text.encode()
