"""pyinfra's callbacks -> the run log (``gpuforge.deploy.runlog``): a ``step`` line per step run.

A layer's converge operation names its steps before their commands run
(``RunLog.steps_begin``) and marks each step as its commands start (``step_reached``);
this callback times each host's operation and, once every host ran it (its results are complete
then), writes a line per step: ok, failed (the step whose command failed) or not run. An operation
that logged no steps (a fact-driven one such as a Helm release) gets one line with its commands.
Operations that ran nothing and did not fail are not logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyinfra.api.state import BaseStateCallback

from gpuforge.deploy.runlog import RunLog, shown, step_lines, wall_time

_ONE_LINE_COMMANDS = 20


def _error(meta: Any) -> str | None:
    lines = [ln.strip() for ln in (meta.stderr or "").splitlines() if ln.strip()]
    return " / ".join(lines[-3:]) or None


def _masked(command: Any) -> str:
    masked = getattr(command, "get_masked_value", None)
    return str(masked() if masked is not None else command)


class RunLogCallback(BaseStateCallback):
    """Writes the run log's ``step`` lines (see the module docstring); ``clock`` for tests."""

    def __init__(self, log: RunLog, clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.clock = log, clock
        self.started: dict[tuple[str, str], float] = {}
        self.ended: dict[tuple[str, str], tuple[float, bool]] = {}

    def operation_host_start(self, state: Any, host: Any, op_hash: Any) -> None:  # type: ignore[override]
        self.started[(host.name, op_hash)] = self.clock()

    def operation_host_success(self, state: Any, host: Any, op_hash: Any, retry_count: int = 0) -> None:  # type: ignore[override]
        self.ended[(host.name, op_hash)] = (self.clock(), True)

    def operation_host_error(  # type: ignore[override]
        self, state: Any, host: Any, op_hash: Any, retry_count: int = 0, max_retries: int = 0
    ) -> None:
        self.ended[(host.name, op_hash)] = (self.clock(), False)

    def operation_end(self, state: Any, op_hash: Any) -> None:  # type: ignore[override]
        self.flush(state, only=op_hash)

    def flush(self, state: Any, only: str | None = None) -> None:
        """Write the lines of finished host operations (of ``only``, or all of them: a run's end)."""
        for (name, op_hash), (ended, ok) in list(self.ended.items()):
            if only is not None and op_hash != only:
                continue
            host = state.inventory.get_host(name)
            data = state.ops.get(host, {}).get(op_hash)
            if data is None or not data.operation_meta.is_complete():
                continue
            del self.ended[(name, op_hash)]
            self._write(state, name, op_hash, data.operation_meta, ended, ok)

    def _write(self, state: Any, name: str, op_hash: str, meta: Any, ended: float, ok: bool) -> None:
        started = self.started.pop((name, op_hash), ended)
        op_name = sorted(n.rsplit(" | ", 1)[-1] for n in state.get_op_meta(op_hash).names)[0]
        where = {"node": name, "layer": op_name.split(":", 1)[0].strip(), "operation": op_name}
        logged = self.log.take_steps(name, op_hash)
        if logged is not None:
            steps, begun = logged
            for fields in step_lines(steps, begun, ended, ok, _error(meta), wall_time):
                self.log.write("step", **where, **fields)
            return
        commands = [_masked(c) for c in meta._commands or []]
        if ok and not commands:
            return
        shown_commands = commands[:_ONE_LINE_COMMANDS] + (["..."] if len(commands) > _ONE_LINE_COMMANDS else [])
        self.log.write(
            "step",
            **where,
            kind="operation",
            summary=op_name,
            command=shown(" ; ".join(shown_commands), whole=True),
            result="ok" if ok else "failed",
            started=wall_time(started),
            duration_s=round(max(0.0, ended - started), 3),
            error=None if ok else shown(_error(meta)),
        )
