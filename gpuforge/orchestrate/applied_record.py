"""The applied-state record: the spec of the last successful apply of a spec file (its location
and the run lock's come with the :class:`~gpuforge.spec.cluster.Cluster`).

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
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gpuforge.spec import Spec, SpecError, parse_spec
from gpuforge.spec.cluster import Cluster


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


@contextmanager
def apply_lock(cluster: Cluster) -> Iterator[None]:
    """Hold this spec file's run lock on the control host; a second holder is refused at once.

    The lock is an ``flock`` (released by the kernel when the holder dies, so it never goes
    stale); the file names the holder for the refusal message.
    """
    path = cluster.lock_file
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


def spec_text(spec: Spec) -> str:
    """The spec as the record keeps it (canonical JSON)."""
    return json.dumps(spec.model_dump(mode="json"), indent=2, sort_keys=True)


def record_applied(cluster: Cluster) -> None:
    """Remember the cluster's spec as the last successful apply (for the next plan's field diff), at
    ``cluster.applied_record`` (keyed by the spec file: :func:`gpuforge.spec.cluster.spec_key`)."""
    write_private(cluster.applied_record, spec_text(cluster.spec))


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a reader sees the old file or the new one), 0600 from
    creation, in a 0700 folder: the applied record, the rollout record, the fetched kubeconfig."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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


def last_applied(cluster: Cluster) -> Spec | None:
    """The last applied spec; None only when there is no record (first bring-up)."""
    path = cluster.applied_record
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


@dataclass
class RolloutRecord:
    """What a run leaves for the next run of the same spec file.

    ``drained``: nodes gpuforge drained (or cordoned) and has not given back yet; written before the
    drain command is sent and cleared after the resume, so an interrupted rollout's next run
    resumes exactly these (and never a node an operator drained). ``spec``/``converged``: the
    nodes that converged to ``spec`` (canonical JSON) while it was not recorded for the whole
    cluster (a ``--limit`` run, a node left for an operator or failed): the next run diffs these
    nodes against ``spec``, not the older whole-cluster record, so they are not drained again.
    """

    drained: list[str] = field(default_factory=list)
    spec: str = ""
    converged: list[str] = field(default_factory=list)

    def converged_spec(self) -> Spec | None:
        """The spec ``converged`` nodes run (None: none recorded, or it no longer parses)."""
        if not self.spec or not self.converged:
            return None
        try:
            return parse_spec(self.spec)
        except Exception:  # a record from another gpuforge version: those nodes fall back to the older record
            return None


def load_rollout_record(cluster: Cluster) -> tuple[RolloutRecord, str | None]:
    """The record, and why it could not be read (then an empty one: no held node is taken for
    gpuforge's, so none is resumed; the caller says so)."""
    path = cluster.rollout_record
    try:
        data = json.loads(path.read_text())
        record = RolloutRecord(
            drained=[str(n) for n in data.get("drained", [])],
            spec=str(data.get("spec", "")),
            converged=[str(n) for n in data.get("converged", [])],
        )
    except FileNotFoundError:
        return RolloutRecord(), None
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        why = f"{path} cannot be read ({type(exc).__name__}): nodes it names as drained by gpuforge stay drained"
        return RolloutRecord(), why
    return record, None


def save_rollout_record(cluster: Cluster, record: RolloutRecord) -> None:
    """Write the record (0600, atomically); no file when it holds nothing."""
    path = cluster.rollout_record
    if not record.drained and not record.converged:
        path.unlink(missing_ok=True)
        return
    doc = {"drained": record.drained, "spec": record.spec, "converged": record.converged}
    write_private(path, json.dumps(doc, indent=2, sort_keys=True))
