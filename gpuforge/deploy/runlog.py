"""The run log: what each apply did to each node, one JSON object a line, under the state dir.

Every apply writes one file, ``<state>/runs/<UTC time>-<cluster>-<pid>.jsonl`` (0600, in a 0700
folder), so that "what did gpuforge do to gpu017 last Tuesday" has an answer (``gpuforge log``):

- ``run``: who ran which spec, on which nodes, with which layers (``--tags``);
- ``step``: one per step run on a node: its layer and operation, kind, summary, command (or the
  file it installs), result (``ok``, ``failed``, ``not run`` after a failed one) and seconds;
- ``drain``, ``resume``, ``reboot``: what the rollout did to whole nodes;
- ``node``: each node's outcome at the end, and ``end``: the run's.

Commands, summaries and errors pass through :func:`redact_url_credentials`; secrets never travel
in a command (they are uploaded as files) and no file's content is logged. Pure Python: the
pyinfra side feeds it from ``gpuforge.deploy.runlog_hooks``.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from gpuforge.deploy.converge import Step
from gpuforge.deploy.secrets import state_root
from gpuforge.spec.redact import redact_url_credentials

#: What a logged summary or error is cut to (a log line stays readable); commands are kept whole.
SHOWN_CHARS = 2000
_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def runs_dir(root: Path | None = None) -> Path:
    """Where the run logs are: ``<state>/runs``."""
    return (root or state_root()) / "runs"


def now_iso() -> str:
    """The time now as ISO 8601 in UTC, to the millisecond (``2026-11-26T02:03:46.427+00:00``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def shown(text: str | None, whole: bool = False) -> str | None:
    """``text`` as the log keeps it: URL credentials hidden, cut to :data:`SHOWN_CHARS` unless ``whole``."""
    if text is None:
        return None
    text = redact_url_credentials(text)
    if whole or len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text):,} characters)"


class RunLogUnwritable(Exception):
    """The run log cannot be made: the apply stops before anything is touched."""

    def __init__(self, folder: Path, error: OSError) -> None:
        super().__init__(
            f"cannot write the run log in {folder}: {error.strerror or error}; nothing was changed "
            "(every apply is logged: make the state directory writable, or set GPUFORGE_STATE_DIR)"
        )


@dataclass
class _Running:
    """The steps of one operation on one host, and when each began (``step_reached``)."""

    steps: list[Step]
    started: list[float] = field(default_factory=list)


class RunLog:
    """One apply's log file, and the steps each host is running now (fed by the deploy side)."""

    def __init__(self, stream: IO[str], path: Path, run_id: str) -> None:
        self._stream, self.path, self.run_id = stream, path, run_id
        self._running: dict[tuple[str, str], _Running] = {}

    @classmethod
    def create(cls, cluster: str, root: Path | None = None) -> RunLog:
        """A new log file for a run of ``cluster`` (0600 in a 0700 folder); OSError when it cannot be made."""
        folder = runs_dir(root)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(folder, 0o700)
        run_id = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S.%fZ')}-{_NAME.sub('_', cluster)}-{os.getpid()}"
        path = folder / f"{run_id}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        return cls(os.fdopen(fd, "a", encoding="utf-8"), path, run_id)

    def write(self, event: str, **fields: Any) -> None:
        """One line: time, run, event and ``fields`` (None values left out)."""
        doc = {"time": now_iso(), "run": self.run_id, "event": event}
        doc.update({k: v for k, v in fields.items() if v is not None})
        self._stream.write(json.dumps(doc, sort_keys=False) + "\n")
        self._stream.flush()

    def close(self) -> None:
        self._stream.close()

    def start_run(self, source: Path, cluster: str, **fields: Any) -> None:
        """The ``run`` line: who runs which spec (``source``: its file, resolved) from where, with the
        caller's options."""
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = str(os.getuid())
        self.write(
            "run",
            cluster=cluster,
            spec=str(source),
            user=user,
            sudo_user=os.environ.get("SUDO_USER") or None,
            host=socket.gethostname(),
            **fields,
        )

    # -- the steps of the operation each host runs now (see gpuforge.deploy.runlog_hooks)

    def steps_begin(self, host: str, op: str, steps: list[Step]) -> None:
        """``host`` is about to run ``steps`` (the commands of operation ``op``)."""
        self._running[(host, op)] = _Running(list(steps))

    def step_reached(self, host: str, op: str, index: int, clock: float | None = None) -> None:
        """``host``'s commands for step ``index`` of ``op`` run now."""
        running = self._running.get((host, op))
        if running is not None:
            running.started.append(time.monotonic() if clock is None else clock)

    def take_steps(self, host: str, op: str) -> tuple[list[Step], list[float]] | None:
        """The steps ``host`` ran for ``op`` and when each began (None: ``op`` logged no steps)."""
        running = self._running.pop((host, op), None)
        return None if running is None else (running.steps, running.started)


def wall_time(clock: float, now_clock: float | None = None) -> str:
    """A ``time.monotonic()`` reading as ISO 8601 in UTC (when a step began)."""
    ago = (time.monotonic() if now_clock is None else now_clock) - clock
    return (datetime.now(UTC) - timedelta(seconds=ago)).isoformat(timespec="milliseconds")


def step_lines(
    steps: list[Step],
    started: list[float],
    ended: float,
    ok: bool,
    error: str | None,
    wall: Callable[[float], str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Fields of one ``step`` line per step: those begun ran (the last one failed when not
    ``ok``), with when they began (``wall`` of their clock reading) and their seconds; those never
    begun are ``not run``."""
    for i, step in enumerate(steps):
        if i >= len(started):
            yield {"kind": step.kind.value, "summary": shown(step.summary), "result": "not run"}
            continue
        last = i == len(started) - 1
        end = ended if last else started[i + 1]
        failed = last and not ok
        yield {
            "kind": step.kind.value,
            "summary": shown(step.summary),
            "started": wall(started[i]) if wall is not None else None,
            "command": shown(step.command, whole=True),
            "path": step.upload.path if step.upload is not None else None,
            "result": "failed" if failed else "ok",
            "duration_s": round(max(0.0, end - started[i]), 3),
            "error": shown(error) if failed else None,
        }


# ---------------------------------------------------------------------------- reading (gpuforge log)


class BadSince(ValueError):
    """A ``--since`` that is neither a date nor an age."""


_AGE = re.compile(r"^(\d+)([smhdw])$")
_AGE_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: an ISO date or time (``2026-11-20``, ``2026-11-20T14:00``, local time unless it
    names its zone) or an age (``30m``, ``12h``, ``7d``, ``2w``), as an aware datetime."""
    now = now or datetime.now(UTC)
    m = _AGE.match(text.strip())
    if m:
        return now - timedelta(**{_AGE_UNITS[m[2]]: int(m[1])})
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadSince(
            f"{text!r} is neither a date or time (2026-11-20, 2026-11-20T14:00) nor an age (30m, 12h, 7d, 2w)"
        ) from None
    return when if when.tzinfo is not None else when.astimezone()


def run_files(root: Path | None = None) -> list[Path]:
    """Every run log, oldest first (their names start with the UTC time)."""
    folder = runs_dir(root)
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def read_entries(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The lines of one run log, and how many could not be read (a line cut by a crash)."""
    entries, bad = [], 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                doc = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(doc, dict):
                entries.append(doc)
            else:
                bad += 1
    return entries, bad


def select_entries(
    entries: list[dict[str, Any]], node: str | None = None, since: datetime | None = None, cluster: str | None = None
) -> list[dict[str, Any]]:
    """A run's lines for ``node`` (with the run's own lines), from ``since``, of ``cluster``; empty
    when nothing of the run is left but its own lines."""
    run = next((e for e in entries if e.get("event") == "run"), {})
    if cluster is not None and run.get("cluster") != cluster:
        return []
    kept = [e for e in entries if (since is None or _when(e) >= since) and (node is None or _about(e, node))]
    return kept if any("node" in e or "nodes" in e for e in kept) else []


def _about(entry: dict[str, Any], node: str) -> bool:
    """Whether a line concerns ``node``: its node, one of its nodes, or the run as a whole."""
    if "node" in entry:
        return bool(entry["node"] == node)
    if "nodes" in entry:
        return node in entry["nodes"]
    return True


def _when(entry: dict[str, Any]) -> datetime:
    try:
        return datetime.fromisoformat(str(entry.get("time")))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
