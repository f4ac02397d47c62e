"""The applied-state record: the spec of the last successful apply of a spec file.

Invariants:
- No record means first bring-up. A record that exists but cannot be read or parsed is never
  taken for "no record" (that would apply a rolling change everywhere at once): reading it
  raises :class:`RecordUnreadable`, and apply refuses unless forced (then every node rolls).
- The record is written atomically (a temp file in the same directory, then rename) and is
  private to its owner (0600 from creation).
"""

from __future__ import annotations

import fcntl
import getpass
import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuforge.deploy.secrets import state_root
from gpuforge.spec import Spec, SpecError, parse_spec


class RecordUnreadable(Exception):
    """The last-applied record exists but cannot be used."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(
            f"the record of the last successful apply, {path}, cannot be read: {reason}. gpuforge cannot tell "
            "which fields changed, so it will not apply everywhere at once. Check the cluster, then either "
            "run `gpuforge apply --force` (every node is treated as changed by a rolling field: drained, applied "
            "and validated batch by batch) or remove the record if the cluster matches the spec."
        )


class ApplyLocked(Exception):
    """Another gpuforge run holds the lock of this spec file."""

    def __init__(self, path: Path, holder: str) -> None:
        self.path, self.holder = path, holder
        super().__init__(
            f"another gpuforge apply of this spec is running ({holder or 'holder unknown'}; lock {path}): "
            "wait for it to finish"
        )


def _spec_key(spec_path: str | Path) -> str:
    return hashlib.sha256(str(Path(spec_path).resolve()).encode()).hexdigest()[:16]


@contextmanager
def apply_lock(spec_path: str | Path) -> Iterator[None]:
    """Hold this spec file's run lock on the control host; a second holder is refused at once.

    The lock is an ``flock`` (released by the kernel when the holder dies, so it never goes
    stale); the file names the holder for the refusal message.
    """
    path = state_root() / "locks" / f"{_spec_key(spec_path)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            raise ApplyLocked(path, holder) from None
        started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        info = f"pid {os.getpid()}, user {getpass.getuser()}, host {socket.gethostname()}, since {started}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, info.encode() + b"\n", 0)
        yield
    finally:
        os.close(fd)


def applied_spec_path(spec_path: str | Path) -> Path:
    """Where the last successfully applied version of a spec file is kept.

    Keyed by the spec file (not the cluster name), so renaming the cluster in the file is
    seen as a change of that cluster, not as a new one.
    """
    return state_root() / "applied" / f"{_spec_key(spec_path)}.json"


def record_applied(spec: Spec, spec_path: str | Path) -> None:
    """Remember the spec of the last successful apply (for the next plan's field diff)."""
    path = applied_spec_path(spec_path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = json.dumps(spec.model_dump(mode="json"), indent=2, sort_keys=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # 0600 from creation
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def last_applied(spec_path: str | Path) -> Spec | None:
    """The last applied spec; None only when there is no record (first bring-up)."""
    path = applied_spec_path(spec_path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordUnreadable(path, str(exc)) from exc
    try:
        return parse_spec(text)
    except SpecError as exc:
        raise RecordUnreadable(path, f"not a valid spec ({len(exc.issues)} problem(s))") from exc
    except Exception as exc:  # the spec parser on arbitrary bytes: any failure means unusable
        raise RecordUnreadable(path, f"{type(exc).__name__}: {exc}") from exc
