"""File facts: digest, mode and ownership of many paths in one round trip (drives idempotent sync)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TypedDict

from gpuforge.probes._common import as_list, parse_marker, to_int


class FileDigest(TypedDict):
    """State of one existing path (not following a final symlink)."""

    sha256: str | None
    mode: str
    owner: str
    group: str
    type: str
    size: int | None


_STAT_TYPES = {
    "regular file": "file",
    "regular empty file": "file",
    "directory": "directory",
    "symbolic link": "symlink",
}


def normalize_mode(mode: str) -> str:
    """Octal permission string with four digits: ``400`` -> ``0400``, ``4755`` -> ``4755``."""
    mode = mode.strip()
    return mode.rjust(4, "0") if mode.isdigit() else mode


def parse_file_digests(lines: list[str]) -> dict[str, FileDigest | None]:
    """Parse the ``__file=``/``__stat=``/``__sha256=``/``__missing=`` records of :class:`FileDigests`."""
    result: dict[str, FileDigest | None] = {}
    current: str | None = None
    for line in lines:
        marker = parse_marker(line)
        if marker is None:
            continue
        key, value = marker
        if key == "missing":
            result[value] = None
            current = None
        elif key == "file":
            current = value
            result[current] = None
        elif key == "stat" and current is not None:
            parts = value.split("|", 4)
            if len(parts) != 5:
                continue
            mode, owner, group, kind, size = parts
            result[current] = FileDigest(
                sha256=None,
                mode=normalize_mode(mode),
                owner=owner,
                group=group,
                type=_STAT_TYPES.get(kind, kind.replace(" ", "_")),
                size=to_int(size),
            )
        elif key == "sha256" and current is not None:
            entry = result.get(current)
            if entry is not None:
                entry["sha256"] = value.strip().lower() or None
    return result


def file_digests_command(paths: Sequence[str] | str) -> str:
    """The shell command whose output ``parse_file_digests`` reads."""
    checked = as_list(paths)
    if not checked:
        raise ValueError("at least one path is required")
    for path in checked:
        if not path.startswith("/") or "\n" in path or "\r" in path:
            raise ValueError(f"paths must be absolute, single-line: {path!r}")
    quoted = " ".join(shlex.quote(path) for path in checked)
    return (
        f"for p in {quoted}; do "
        'if [ -e "$p" ] || [ -L "$p" ]; then '
        "printf '__file=%s\\n' \"$p\"; "
        "printf '__stat=%s\\n' \"$(stat -c '%a|%U|%G|%F|%s' -- \"$p\")\"; "
        'if [ -f "$p" ] && [ ! -L "$p" ]; then '
        'h=$(sha256sum -- "$p" 2>/dev/null) || h=; '
        "printf '__sha256=%s\\n' \"${h%% *}\"; fi; "
        "else printf '__missing=%s\\n' \"$p\"; fi; done; true"
    )
