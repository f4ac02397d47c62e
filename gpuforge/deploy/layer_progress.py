"""Per-layer progress of a pyinfra run: nodes done / running / failed, elapsed time, slowest node.

``LayerProgress`` is the bookkeeping (plain Python, tested with events in, messages out);
``ProgressCallback`` feeds it from pyinfra's state callbacks. A layer is the part of an
operation's name before ``:`` (``slurm: packages and configs`` -> ``slurm``); when the run moves
on to the next layer, the finished one is reported as a :class:`gpuforge.progress.Milestone`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyinfra.api.state import BaseStateCallback

from gpuforge.progress import Milestone


@dataclass
class _Layer:
    name: str
    started: float
    nodes: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    running: dict[str, float] = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=dict)


class LayerProgress:
    """Turns op/host events into messages; ``clock`` is injectable for tests."""

    def __init__(self, say: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.say = say
        self.clock = clock
        self.layer: _Layer | None = None

    @staticmethod
    def layer_of(op_name: str) -> str:
        return op_name.split(":", 1)[0].strip() or op_name

    def op_start(self, op_name: str) -> None:
        name = self.layer_of(op_name)
        if self.layer is None or self.layer.name != name:
            self.finish()
            self.layer = _Layer(name, self.clock())

    def host_start(self, host: str) -> None:
        if self.layer is not None:
            self.layer.nodes.add(host)
            self.layer.running[host] = self.clock()
            self._update()

    def host_end(self, host: str, ok: bool) -> None:
        lay = self.layer
        if lay is None or host not in lay.running:
            return
        lay.spent[host] = lay.spent.get(host, 0.0) + self.clock() - lay.running.pop(host)
        if not ok:
            lay.failed.add(host)
        self._update()

    def _slowest(self) -> tuple[str, float] | None:
        lay = self.layer
        if lay is None:
            return None
        now = self.clock()
        times = {h: lay.spent.get(h, 0.0) + (now - t if h in lay.running else 0.0) for h, t in lay.running.items()}
        for h, t in lay.spent.items():
            times.setdefault(h, t)
        return max(times.items(), key=lambda kv: (kv[1], kv[0])) if times else None

    def _update(self) -> None:
        lay = self.layer
        assert lay is not None
        done = len(lay.nodes) - len(lay.running)
        slow = self._slowest()
        text = (
            f"{lay.name}: {done}/{len(lay.nodes)} node(s) done, {len(lay.running)} running, "
            f"{len(lay.failed)} failed, {self.clock() - lay.started:.0f} s"
        )
        if lay.running and slow is not None:
            text += f"; slowest {slow[0]} ({slow[1]:.0f} s)"
        self.say(text)

    def finish(self) -> None:
        """Report the current layer as finished (a Milestone) and forget it."""
        lay = self.layer
        if lay is None or not lay.nodes:
            self.layer = None
            return
        slow = self._slowest()
        ok = len(lay.nodes) - len(lay.failed)
        text = f"{lay.name}: {ok} node(s) ok, {len(lay.failed)} failed in {self.clock() - lay.started:.1f} s"
        if lay.failed:
            text += f" (failed: {', '.join(sorted(lay.failed))})"
        if slow is not None and len(lay.nodes) > 1:
            text += f"; slowest {slow[0]} {slow[1]:.1f} s"
        self.say(Milestone(text))
        self.layer = None


class ProgressCallback(BaseStateCallback):
    """pyinfra state callbacks -> :class:`LayerProgress`."""

    def __init__(self, progress: LayerProgress) -> None:
        self.progress = progress

    def operation_start(self, state: Any, op_hash: Any) -> None:  # type: ignore[override]
        names = state.get_op_meta(op_hash).names
        self.progress.op_start(sorted(n.rsplit(" | ", 1)[-1] for n in names)[0] if names else "?")

    def operation_host_start(self, state: Any, host: Any, op_hash: Any) -> None:  # type: ignore[override]
        self.progress.host_start(host.name)

    def operation_host_success(self, state: Any, host: Any, op_hash: Any, retry_count: int = 0) -> None:  # type: ignore[override]
        self.progress.host_end(host.name, True)

    def operation_host_error(  # type: ignore[override]
        self, state: Any, host: Any, op_hash: Any, retry_count: int = 0, max_retries: int = 0
    ) -> None:
        self.progress.host_end(host.name, False)
