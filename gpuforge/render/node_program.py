"""The node-local health check as ONE file: ``nodelocal`` and the modules it imports.

Nodes have no gpuforge installed, and ``gpuforge validate`` runs the checker as ``python3 -``
with the program on stdin, so it must be a single file. It is built here from the package's
own modules: their sources are embedded and served by a small importer, then
``gpuforge.validator.nodelocal.main()`` runs. The readings the checks use are therefore the
same code as the deploy facts' (``gpuforge.probes``), and the Xid table the same as the alert
rules' (``gpuforge.spec.xid_catalog``): not copies. Every embedded module is standard library
only (tests/validator/test_node_program.py).

The bytes depend only on the sources (sorted, no timestamps): an unchanged program is an
unchanged file on the node, so a re-apply changes nothing.
"""

from __future__ import annotations

import ast
import hashlib
import json
from functools import cache
from importlib.util import find_spec
from pathlib import Path

ENTRY = "gpuforge.validator.nodelocal"
#: Package ``__init__`` modules are embedded empty: the program needs only their submodules.
PACKAGES = ("gpuforge", "gpuforge.probes", "gpuforge.spec", "gpuforge.validator", "gpuforge.validator.node")

_BOOTSTRAP = '''#!/usr/bin/env python3
"""gpuforge node health check (built from gpuforge.validator.nodelocal and the modules it imports; do not edit)."""
import marshal
import os
import stat
import sys
from importlib.machinery import ModuleSpec

PACKAGES = frozenset(PACKAGES_LIST)
#: Compiled modules are kept here between runs: a folder only this user can write, checked before
#: each use (a user who cannot have one compiles every run). GPUFORGE_NODE_PROGRAM_CACHE names
#: another folder, or "off".
CACHE_DIR = os.environ.get("GPUFORGE_NODE_PROGRAM_CACHE", "/var/cache/gpuforge/node-program")
CACHE_KEEP = 8
CACHE_HEADER = f"gpuforge-node-program {SOURCES_SHA256} {sys.version} {marshal.version}\\n".encode()


def _private_dir(path):
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _load_cached(path):
    """The compiled modules from the cache, or None (absent, not private, another Python, damaged)."""
    try:
        if not _private_dir(CACHE_DIR):
            return None
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.geteuid() or st.st_mode & 0o077 or f.read(len(CACHE_HEADER)) != CACHE_HEADER:
                return None
            codes = marshal.load(f)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    return codes if isinstance(codes, dict) and codes.keys() == SOURCES.keys() else None


def _store(path, codes):
    """Write the cache atomically (a private temporary file renamed into place); keep the newest few."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
        if not _private_dir(CACHE_DIR):
            return
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as f:
            f.write(CACHE_HEADER)
            marshal.dump(codes, f)
        os.replace(tmp, path)
        entries = sorted(os.scandir(CACHE_DIR), key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
        for old in entries[CACHE_KEEP:]:
            os.unlink(old.path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _compiled():
    """Module name -> code object: from the cache when it holds these sources, else compiled."""
    path = None
    if CACHE_DIR not in ("", "off"):
        path = os.path.join(CACHE_DIR, f"{SOURCES_SHA256}.{sys.implementation.cache_tag}")
    codes = _load_cached(path) if path else None
    if codes is None:
        codes = {name: compile(text, f"<gpuforge:{name}>", "exec") for name, text in SOURCES.items()}
        if path:
            _store(path, codes)
    return codes


class EmbeddedModules:
    """Finder and loader of the embedded modules (importlib's protocol without its abc base
    classes: importing importlib.abc costs more than the rest of this bootstrap)."""

    def __init__(self, codes):
        self.codes = codes

    def find_spec(self, name, path=None, target=None):
        if name not in self.codes:
            return None
        return ModuleSpec(name, self, is_package=name in PACKAGES)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(self.codes[module.__name__], module.__dict__)


sys.meta_path.insert(0, EmbeddedModules(_compiled()))
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
    sources_json = json.dumps(sources, sort_keys=True)
    header = "import json\n\nSOURCES_JSON = " + repr(sources_json) + "\n"
    header += "SOURCES = json.loads(SOURCES_JSON)\n"
    header += "SOURCES_SHA256 = " + repr(hashlib.sha256(sources_json.encode()).hexdigest()) + "\n"
    header += "PACKAGES_LIST = " + repr(sorted(PACKAGES)) + "\n"
    shebang, _, rest = _BOOTSTRAP.partition("\n")
    doc_end = rest.index('"""', 3) + 3
    text = shebang + "\n" + rest[:doc_end] + "\n" + header + rest[doc_end:]
    return text.encode()
