"""A node's SSH host keys: the ones it shows now (OpenSSH's ``ssh-keyscan``, no login) and the ones
known_hosts records for it (``ssh-keygen -F``, hashed entries included).

Keys are compared as ``"<type> <base64>"`` strings. Invariants: a node that does not answer (no
listener, a timeout, a banner that is not SSH) shows no key (an empty set), never an error; the
commands get argv lists (no shell) and a bounded time.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gpuforge.spec.bounded_read import NodeOutputError, run_bounded

#: Seconds ssh-keyscan waits for a node (its ``-T``).
SCAN_TIMEOUT = 5


def destination(host: str, port: int) -> str:
    """How known_hosts names ``host``: ``[host]:port`` unless the port is 22."""
    return host if port == 22 else f"[{host}]:{port}"


def parse_keys(text: str) -> set[str]:
    """The ``type base64`` of each known_hosts-format line (``name type base64 [comment]``); ``#`` lines skipped."""
    keys: set[str] = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#"):
            keys.add(f"{fields[1]} {fields[2]}")
    return keys


def scanned(host: str, port: int) -> set[str]:
    """The host keys the SSH server at ``host:port`` shows now (empty: it does not answer)."""
    argv = ["ssh-keyscan", "-T", str(SCAN_TIMEOUT), "-p", str(port), host]
    try:
        done = run_bounded(argv, b"", SCAN_TIMEOUT * 4 + 5)
    except (OSError, subprocess.TimeoutExpired, NodeOutputError):
        return set()
    return parse_keys(done.stdout.decode("utf-8", "replace"))


def known_hosts_file(configured: Path | None) -> Path:
    """The spec's ``ssh.known_hosts``, else the user's own (what ssh reads)."""
    return configured or Path(os.path.expanduser("~/.ssh/known_hosts"))


def recorded(known_hosts: Path, host: str, port: int) -> set[str]:
    """The keys ``known_hosts`` holds for ``host:port`` (empty: none, or no such file)."""
    if not known_hosts.is_file():
        return set()
    argv = ["ssh-keygen", "-F", destination(host, port), "-f", str(known_hosts)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return parse_keys(done.stdout)


def trust(known_hosts: Path, host: str, port: int, keys: set[str]) -> None:
    """Make ``keys`` the only keys ``known_hosts`` records for ``host:port``: its old lines removed
    (``ssh-keygen -R``, hashed ones too), the new ones appended; the file is created 0600 if missing.
    Raises OSError when ``ssh-keygen`` fails."""
    name = destination(host, port)
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    if known_hosts.is_file():
        argv = ["ssh-keygen", "-R", name, "-f", str(known_hosts)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise OSError(f"ssh-keygen -R {name}: {done.stderr.strip()[-300:]}")
        Path(f"{known_hosts}.old").unlink(missing_ok=True)  # ssh-keygen's copy of the old file
    fd = os.open(known_hosts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as out:
        out.writelines(f"{name} {key}\n" for key in sorted(keys))
