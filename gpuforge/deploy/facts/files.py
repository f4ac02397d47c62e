"""pyinfra facts over the parsers in :mod:`gpuforge.probes.files` (one command round trip each)."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra.api import FactBase

from gpuforge.probes.files import FileDigest, file_digests_command, parse_file_digests


class FileDigests(FactBase[dict[str, FileDigest | None]]):
    """SHA-256, octal mode, owner and group for each path; None for paths that do not exist.

    Symlinks are reported as links (``type: symlink``, no digest), not followed. Files the
    connecting user cannot read get ``sha256: None``.
    """

    def command(self, paths: Sequence[str] | str) -> str:
        return file_digests_command(paths)

    @staticmethod
    def default() -> dict[str, FileDigest | None]:
        return {}

    def process(self, output: list[str]) -> dict[str, FileDigest | None]:
        return parse_file_digests(output)
