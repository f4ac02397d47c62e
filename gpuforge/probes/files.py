"""File readings: digest, mode and ownership of many paths in one round trip (drives idempotent sync),
one file's text, and the texts of several files in one round trip (what validate diffs on drift)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import shlex
import stat
from collections.abc import Sequence
from typing import TypedDict

from gpuforge.probes._common import CommandOutput, as_list, parse_marker, split_guarded, to_int
from gpuforge.probes.reading import Reading


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
    """Parse the ``__file=``/``__stat=``/``__sha256=``/``__missing=`` records of :func:`file_digests_command`.

    A path the command cannot see (missing, or in a directory this user may not search) maps to None.
    """
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


def _absolute(paths: list[str]) -> list[str]:
    if not paths:
        raise ValueError("at least one path is required")
    for path in paths:
        if not path.startswith("/") or "\n" in path or "\r" in path:
            raise ValueError(f"paths must be absolute, single-line: {path!r}")
    return paths


def file_digests_command(paths: Sequence[str] | str) -> str:
    """The shell command whose output ``parse_file_digests`` reads."""
    checked = _absolute(as_list(paths))
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


def file_text_command(path: str) -> str:
    """One file's lines and ``__rc=``, or ``__missing=<path>`` when it does not exist."""
    (checked,) = _absolute([path])
    quoted = shlex.quote(checked)
    return f'if [ -e {quoted} ]; then cat -- {quoted} 2>&1; echo "__rc=$?"; else echo "__missing={checked}"; fi'


FILE_DIGESTS: Reading[dict[str, FileDigest | None]] = Reading("files.digests", file_digests_command, parse_file_digests)
#: ``missing`` is the path when the file does not exist; ``lines`` its text.
FILE_TEXT: Reading[CommandOutput] = Reading("files.text", file_text_command, split_guarded)

#: The most of one file ``file_texts_command`` returns (a larger file is cut there, and says so).
TEXT_LIMIT = 256 * 1024


def file_texts_command(paths: Sequence[str] | str) -> str:
    """Several files' contents, each base64-encoded on one line after its ``__file=`` marker
    (``__missing=`` for a path that is not a readable file), at most ``TEXT_LIMIT`` bytes each."""
    quoted = " ".join(shlex.quote(path) for path in _absolute(as_list(paths)))
    return (
        f"for p in {quoted}; do "
        'if [ -f "$p" ] && [ -r "$p" ]; then '
        "printf '__file=%s\\n' \"$p\"; "
        f'head -c {TEXT_LIMIT} -- "$p" | base64 -w0; echo; '
        "else printf '__missing=%s\\n' \"$p\"; fi; done; true"
    )


def parse_file_texts(lines: list[str]) -> dict[str, str | None]:
    """Path -> text (undecodable bytes replaced), or None for a missing/unreadable file."""
    texts: dict[str, str | None] = {}
    current: str | None = None
    for line in lines:
        marker = parse_marker(line)
        if marker is not None and marker[0] in ("file", "missing"):
            current = marker[1] if marker[0] == "file" else None
            texts[marker[1]] = None
        elif current is not None:
            try:
                texts[current] = base64.b64decode(line.strip(), validate=True).decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                texts[current] = None
            current = None
    return texts


FILE_TEXTS: Reading[dict[str, str | None]] = Reading("files.texts", file_texts_command, parse_file_texts)


#: The lock a gpuforge apply holds on a node for its whole run (``gpuforge.orchestrate.node_lock``).
APPLY_LOCK_FILE = "/run/gpuforge/apply.lock"


class ManagedFiles(TypedDict):
    """The managed files' states, and whether an apply holds the node (then they may be half-way)."""

    apply_running: bool
    files: dict[str, FileDigest | None]


def managed_files_command(paths: Sequence[str] | str) -> str:
    """``__apply=running`` when an apply holds the node's lock (a shared ``flock`` cannot be had at
    once; the apply waits out that moment), then the state of ``paths``: one ``stat`` and one
    ``sha256sum`` for all of them (the health check runs on busy nodes: no process per file)."""
    lock = shlex.quote(APPLY_LOCK_FILE)
    quoted = " ".join(shlex.quote(path) for path in _absolute(as_list(paths)))
    return (
        f"if [ -e {lock} ] && ! flock -n -s {lock} true 2>/dev/null; then echo __apply=running; fi; "
        f"set --; for p in {quoted}; do "
        'if [ -e "$p" ] || [ -L "$p" ]; then set -- "$@" "$p"; else printf \'__missing=%s\\n\' "$p"; fi; done; '
        "[ $# -gt 0 ] && stat -c '__stat=%n|%a|%U|%G|%F|%s' -- \"$@\"; "
        f"set --; for p in {quoted}; do "
        'if [ -f "$p" ] && [ ! -L "$p" ]; then set -- "$@" "$p"; fi; done; '
        '[ $# -gt 0 ] && sha256sum -- "$@" 2>/dev/null; true'
    )


_SUM = re.compile(r"^(?P<sha>[0-9a-f]{64})  (?P<path>/.*)$")


def parse_managed_files(lines: list[str]) -> ManagedFiles:
    """Paths missing map to None; ``__stat=`` gives the rest, a ``sha256sum`` line the digest."""
    files: dict[str, FileDigest | None] = {}
    running = False
    for line in lines:
        marker = parse_marker(line)
        if marker == ("apply", "running"):
            running = True
        elif marker is not None and marker[0] == "missing":
            files[marker[1]] = None
        elif marker is not None and marker[0] == "stat":
            parts = marker[1].rsplit("|", 5)
            if len(parts) == 6:
                path, mode, owner, group, kind, size = parts
                kind = _STAT_TYPES.get(kind, kind.replace(" ", "_"))
                files[path] = FileDigest(
                    sha256=None, mode=normalize_mode(mode), owner=owner, group=group, type=kind, size=to_int(size)
                )
        elif (m := _SUM.match(line.rstrip("\n"))) and files.get(m.group("path")) is not None:
            entry = files[m.group("path")]
            assert entry is not None
            entry["sha256"] = m.group("sha")
    return ManagedFiles(apply_running=running, files=files)


MANAGED_FILES: Reading[ManagedFiles] = Reading("files.managed", managed_files_command, parse_managed_files)


#: What a keyed digest reads of one file at most: a rendered secret-bearing file is far smaller
#: (a munge key is 1 KiB), so a larger file on the node differs anyway, and is never read whole.
KEYED_READ_LIMIT = 4 << 20
#: The most of the key file read: gpuforge writes 65 bytes (hex and a newline).
KEY_READ_LIMIT = 4096


def keyed_digest(key: bytes, data: bytes) -> str:
    """HMAC-SHA256 of ``data`` under ``key``, in hex: the health config's ``hmac`` of a file holding
    credentials (no word list reverses it without the node's key)."""
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _read_limited(path: str, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the regular file ``path`` (a final symlink not followed); None when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = b""
        while len(data) < limit and (chunk := os.read(fd, min(limit - len(data), 1 << 20))):
            data += chunk
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


def read_keyed_digests(paths: Sequence[str] | str, key_path: str) -> list[str]:
    """``__hmac=<path>|<hex>`` per path (``|`` and nothing: not a readable regular file), keyed by the
    bytes of ``key_path``; only ``__nokey=<key_path>`` when the key cannot be read. In-process: the
    key is never on a command line, in the environment or in the output."""
    checked = as_list(paths)
    if checked:
        _absolute([*checked, key_path])
    key = _read_limited(key_path, KEY_READ_LIMIT)
    if not key:
        return [f"__nokey={key_path}"]
    out = []
    for path in checked:
        data = _read_limited(path, KEYED_READ_LIMIT + 1)
        out.append(f"__hmac={path}|{keyed_digest(key, data) if data is not None else ''}")
    return out


#: :func:`read_keyed_digests` for ``python3`` on a node without gpuforge (the deploy's facts over
#: SSH); a test holds it to the same lines as the in-process reader.
_KEYED_SCRIPT = """
import hashlib, hmac, os, stat, sys
def rd(p, n):
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        d = b""
        while len(d) < n:
            c = os.read(fd, min(n - len(d), 1048576))
            if not c:
                break
            d += c
        return d
    except OSError:
        return None
    finally:
        os.close(fd)
k = rd(sys.argv[1], KEY_LIMIT)
if not k:
    print("__nokey=" + sys.argv[1])
    sys.exit(0)
for p in sys.argv[2:]:
    d = rd(p, DATA_LIMIT)
    print("__hmac=" + p + "|" + (hmac.new(k, d, hashlib.sha256).hexdigest() if d is not None else ""))
""".replace("KEY_LIMIT", str(KEY_READ_LIMIT)).replace("DATA_LIMIT", str(KEYED_READ_LIMIT + 1))


def keyed_digests_command(paths: Sequence[str] | str, key_path: str) -> str:
    """The shell command printing what :func:`read_keyed_digests` returns (``python3``, the key by path only)."""
    checked = as_list(paths)
    if not checked:
        return "true"
    quoted = " ".join(shlex.quote(p) for p in _absolute([key_path, *checked]))
    return f"python3 -I -c {shlex.quote(_KEYED_SCRIPT)} {quoted} 2>/dev/null || true"


class KeyedDigests(TypedDict):
    """Keyed digests by path (None: not a readable file); ``read`` False: none computed (the key
    unreadable, or the reader failed)."""

    read: bool
    digests: dict[str, str | None]


_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def parse_keyed_digests(lines: list[str]) -> KeyedDigests:
    """Total: a line that is no ``__hmac=`` record with a 64-hex digest or nothing maps its path to None."""
    digests: dict[str, str | None] = {}
    readable = True
    for line in lines:
        marker = parse_marker(line)
        if marker is None:
            continue
        if marker[0] == "nokey":
            readable = False
        elif marker[0] == "hmac" and "|" in marker[1]:
            path, digest = marker[1].rsplit("|", 1)
            digests[path] = digest if _HEX64.match(digest) else None
    return KeyedDigests(read=readable and bool(digests), digests=digests)


KEYED_DIGESTS: Reading[KeyedDigests] = Reading(
    "files.keyed", keyed_digests_command, parse_keyed_digests, local=read_keyed_digests
)
