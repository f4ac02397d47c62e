"""Files the image build writes, written so that nothing planted beforehand is followed.

Invariants: a file is written to a fresh temp file (``mkstemp``: ``O_CREAT|O_EXCL``, an
unpredictable name, 0600) in its destination's folder and renamed over the destination, so a
link planted at the destination is replaced, never written through, and no reader sees half a
file. Inside an image tree (a root file system the build's packages wrote), a destination whose
folder resolves outside the tree (a link to the build host's ``/etc``) is refused.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator


class UnsafePath(OSError):
    """A destination that would write outside the image tree."""


def private_temp(directory: str, prefix: str, suffix: str = "") -> str:
    """A new empty file in ``directory`` only this process created (0600, unpredictable name)."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    os.close(fd)
    return path


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
    """A private temp file beside ``path`` to write; renamed over ``path`` when the block ends
    without an error, removed otherwise."""
    folder, name = os.path.split(os.path.abspath(path))
    tmp = private_temp(folder, f".{name}.", ".partial")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_file(path: str, data: bytes, mode: int = 0o644) -> None:
    """``path`` holds ``data`` with ``mode``, written through :func:`replacing`."""
    with replacing(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)


def write_in_tree(tree: str, rel: str, data: bytes, mode: int = 0o644) -> str:
    """``data`` written at ``rel`` inside the image tree ``tree`` (folders made as needed); raises
    UnsafePath when the folder it lands in resolves outside ``tree``."""
    path = os.path.join(tree, rel.lstrip("/"))
    folder = os.path.dirname(path)
    os.makedirs(tree, exist_ok=True)
    existing = folder
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    _inside(tree, existing, rel)  # before a folder is made through a link
    os.makedirs(folder, exist_ok=True)
    _inside(tree, folder, rel)
    write_file(path, data, mode)
    return path


def _inside(tree: str, folder: str, rel: str) -> None:
    root, real = os.path.realpath(tree), os.path.realpath(folder)
    if real != root and not real.startswith(root + os.sep):
        raise UnsafePath(f"{rel}: its folder leads outside the image tree (to {real}): refused")
