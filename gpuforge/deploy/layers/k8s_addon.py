"""One cluster add-on as the first control plane applies it: its stamp, digest and command.

Invariants: the stamp file holds the digest of the add-on's inputs and is written only after its
command succeeded (a helm add-on's also records the release revision helm reported right then);
an add-on without a source has no command and says why (``reason``).
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass

from gpuforge.deploy.layers.helm_release import HelmRelease
from gpuforge.deploy.layers.nvidia.common import upload_file
from gpuforge.render import nvidia_sources as src
from gpuforge.render.files import RenderedFile

STAMP_DIR = "/var/lib/gpuforge/k8s"


@dataclass(frozen=True)
class AddOn:
    """One add-on: its stamp name, what a person reads, the digest of its inputs and its command
    (``command`` None: it has no source, ``reason`` says why)."""

    name: str
    summary: str
    digest: str
    command: str | None
    reason: str | None = None
    pushed: tuple[RenderedFile, ...] = ()
    """Bundle files the command needs on the node (offline mode)."""
    release: HelmRelease | None = None
    """The helm release the command installs (its live state is compared too)."""

    @property
    def stamp(self) -> str:
        return f"{STAMP_DIR}/{self.name}.applied"

    def stamp_command(self) -> str:
        """Records that the command succeeded (and, for a helm release, its revision)."""
        if self.release is not None:
            return self.release.stamp_command(self.digest, self.stamp)
        return f"install -d -m 0755 {STAMP_DIR} && echo {shlex.quote(self.digest)} > {self.stamp}"


def sha16(text: str | bytes) -> str:
    """The first 16 hex digits of the sha256 of ``text`` (a digest's part)."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()[:16]


def fetch_artifact(a: src.Artifact) -> tuple[str | None, tuple[RenderedFile, ...]]:
    """The command that leaves an artifact on the node (and the bundle file pushed for it)."""
    if not a.available:
        return None, ()
    pushed = (upload_file(a.node_path, src.bundle_files_single(a.local)),) if a.local else ()
    return src.fetch_command(a), pushed
