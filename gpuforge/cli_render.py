"""``gpuforge render -o DIR``: every rendered node's files as a tree, with nothing left of an earlier render.

Invariants:
- A node's folder ``DIR/<node>`` holds exactly what this render gives it: it is written whole in a
  fresh folder beside it, then swapped in by rename (the old one removed after), so a file the spec
  no longer renders (a removed mount unit) is gone and an interrupted render leaves the old folder
  or the new one.
- ``DIR/.gpuforge-render`` lists the node folders gpuforge wrote there. A full render (no
  ``--limit``) removes listed folders of nodes the spec no longer has; nothing else in ``DIR`` is
  ever touched (a folder gpuforge did not write is not its to remove).
- No file is written outside its node's folder (a path that would leave it is refused).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from gpuforge.render.files import RenderedFile

MARKER = ".gpuforge-render"


class RenderTreeError(ValueError):
    """A rendered path that would leave its node's folder."""


def _listed(root: Path) -> set[str]:
    try:
        return {line for line in (root / MARKER).read_text().splitlines() if line and "/" not in line}
    except OSError:
        return set()


def _write_listed(root: Path, names: set[str]) -> None:
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f"{MARKER}.")
    with os.fdopen(fd, "w") as out:
        out.write("".join(f"{n}\n" for n in sorted(names)))
    os.replace(tmp, root / MARKER)


def _node_tree(root: Path, node: str, files: list[RenderedFile]) -> int:
    """Write ``files`` into a fresh folder and swap it in as ``root/node``; the number of files."""
    fresh = Path(tempfile.mkdtemp(dir=root, prefix=f".{node}.new-"))
    try:
        for f in files:
            target = (fresh / f.path.lstrip("/")).resolve()
            if not target.is_relative_to(fresh.resolve()):
                raise RenderTreeError(f"refused: {f.path} of {node} would leave {root / node}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(f.shown)  # credentials from the spec hidden, as plans show them
        fresh.chmod(0o755)
        old = root / node
        aside = root / f".{node}.old"
        shutil.rmtree(aside, ignore_errors=True)
        if old.exists() or old.is_symlink():
            old.rename(aside)
        fresh.rename(old)
        shutil.rmtree(aside, ignore_errors=True)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    return len(files)


def write_tree(root: Path, rendered: dict[str, list[RenderedFile]], full: bool) -> int:
    """Write each node's folder under ``root`` (see the module's invariants); the number of files.

    ``full``: every node of the spec was rendered, so listed folders of nodes it no longer has go.
    """
    root.mkdir(parents=True, exist_ok=True)
    listed = _listed(root)
    written = sum(_node_tree(root, node, files) for node, files in rendered.items())
    if full:
        for gone in sorted(listed - set(rendered)):
            shutil.rmtree(root / gone, ignore_errors=True)
        listed = set(rendered)
    _write_listed(root, listed | set(rendered))
    return written
