"""The image's root filesystem as one tar: names sorted, numeric owners, file capabilities kept.

GNU tar does the walk (hard links, device nodes, sparse files and xattrs as it always does):
``--sort=name`` (deterministic order), ``--numeric-owner``, ``--xattrs`` with only
``security.capability`` (ping's capability; SELinux labels are not carried), ``--one-file-system``.
"""

from __future__ import annotations

import subprocess

from gpuforge.image.safe_files import replacing

TAR_OPTIONS: tuple[str, ...] = (
    "--sort=name",
    "--numeric-owner",
    "--xattrs",
    "--xattrs-include=security.capability",
    "--one-file-system",
    "--format=posix",
    "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
)


def tar_argv(root: str, out: str) -> list[str]:
    """``tar`` that writes ``root``'s content (``./...``) to ``out``."""
    return ["tar", *TAR_OPTIONS, "-C", root, "-cf", out, "."]


def write_tarball(root: str, out: str) -> None:
    """``root`` as a tarball at ``out``, written to a private temp file and renamed over it."""
    with replacing(out) as tmp:
        subprocess.run(tar_argv(root, tmp), check=True, capture_output=True, text=True)


def extract_argv(tarball: str, dest: str) -> list[str]:
    """``tar`` that unpacks an image tarball (owners and capabilities as stored)."""
    return ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=security.capability", "-C", dest, "-xpf", tarball]
