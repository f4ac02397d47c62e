"""Checks, results, the registry (``@check``) and the context a check reads its inputs from."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from gpuforge.probes.nvidia_smi import NvidiaSmiGpuInfo
from gpuforge.probes.pci import NvidiaPciInfo
from gpuforge.probes.systemd import UnitState
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS, SKIP, STATUSES, Config, Outcome
from gpuforge.validator.node.inputs import INPUTS, LSPCI, SMI, SYSFS_PCI, UNITS, Input

T = TypeVar("T")


@dataclass(frozen=True)
class Check:
    """A registered check: stable id, layer, severity, dependencies and its function."""

    id: str
    layer: str
    severity: str
    description: str
    fn: Callable[..., Outcome]
    depends_on: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    gate: Callable[..., str | None] | None = None
    health: bool = True
    """Part of ``gpuforge health``: fast, and about this node's ability to run jobs (a failure
    drains it). False: ``gpuforge validate`` only (slow, or about cluster services)."""
    scope: str = "node"
    validate: bool = True
    """Part of ``gpuforge validate``. False: the health check's cheap stand-in for a fuller
    cluster check of validate's (which then reports it once)."""


@dataclass
class Result:
    """The outcome of one check on one node."""

    id: str
    layer: str
    severity: str
    status: str
    message: str
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluate(check: Check, gate_reason: str | None, results: dict[str, Result], call: Callable[[], Outcome]) -> Result:
    """Run ``check`` unless it does not apply (skip) or a dependency did not pass (blocked)."""

    def result(status: str, message: str, duration: float = 0.0) -> Result:
        return Result(check.id, check.layer, check.severity, status, message, round(duration, 4))

    if gate_reason:
        return result(SKIP, gate_reason)
    for dep in check.depends_on:
        got = results.get(dep)
        if got is None:
            return result(BLOCKED, f"needs {dep}, which did not run")
        if got.status != PASS:
            return result(BLOCKED, f"{dep} {got.status}: {got.message}"[:300])
    t0 = time.monotonic()
    try:
        status, message = call()
    except Exception as e:  # a crashing check is a failing check, never a pass
        return result(FAIL, f"check crashed: {type(e).__name__}: {e}", time.monotonic() - t0)
    if status not in STATUSES:
        return result(FAIL, f"check returned an unknown status {status!r}: {message}", time.monotonic() - t0)
    return result(status, message, time.monotonic() - t0)


def order_checks(checks: Sequence[Check]) -> list[Check]:
    """Dependencies first, otherwise in registration order; unknown dependencies are ignored here."""
    by_id = {c.id: c for c in checks}
    done: set[str] = set()
    out: list[Check] = []

    def visit(c: Check, stack: tuple[str, ...]) -> None:
        if c.id in done:
            return
        if c.id in stack:
            raise ValueError(f"dependency cycle: {' -> '.join((*stack, c.id))}")
        for dep in c.depends_on:
            if dep in by_id:
                visit(by_id[dep], (*stack, c.id))
        done.add(c.id)
        out.append(c)

    for c in checks:
        visit(c, ())
    return out


def with_dependencies(all_checks: Sequence[Check], wanted: Iterable[str]) -> list[Check]:
    """``wanted`` ids plus everything they depend on, in registration order."""
    by_id = {c.id: c for c in all_checks}
    keep: set[str] = set()
    todo = list(wanted)
    while todo:
        cid = todo.pop()
        if cid in keep or cid not in by_id:
            continue
        keep.add(cid)
        todo.extend(by_id[cid].depends_on)
    return [c for c in all_checks if c.id in keep]


NODE_CHECKS: list[Check] = []


def check(
    id: str,
    layer: str,
    severity: str,
    description: str,
    depends_on: tuple[str, ...] = (),
    needs: tuple[str, ...] = (),
    gate: Callable[[Config], str | None] | None = None,
    health: bool = True,
    validate: bool = True,
) -> Callable[[Callable[[NodeContext], Outcome]], Callable[[NodeContext], Outcome]]:
    """Register a node-local check."""

    def wrap(fn: Callable[[NodeContext], Outcome]) -> Callable[[NodeContext], Outcome]:
        NODE_CHECKS.append(
            Check(id, layer, severity, description, fn, depends_on, needs, gate, health, validate=validate)
        )
        return fn

    return wrap


class NodeContext:
    """The node's config and what its inputs read (each once, cheap ones in parallel).

    ``outputs`` holds each input's raw lines (recorded ones in tests); :meth:`read` parses them
    with the input's reading, once.
    """

    def __init__(self, cfg: Config, outputs: dict[str, list[str]] | None = None) -> None:
        self.cfg = cfg
        self.outputs: dict[str, list[str]] = dict(outputs or {})
        self.durations: dict[str, float] = {}
        self.data: dict[str, dict[str, Any]] = {}
        self._charged: set[str] = set()
        self._parsed: dict[str, Any] = {}

    def _run(self, key: str) -> list[str]:
        t0 = time.monotonic()
        try:
            lines = INPUTS[key].read(self.cfg)
        except Exception as e:  # an input that cannot be read says why
            lines = [f"__error={type(e).__name__}: {e}"]
        self.durations[key] = time.monotonic() - t0
        return lines

    def prefetch(self, keys: Iterable[str]) -> None:
        """Read the cheap inputs among ``keys`` in parallel."""
        todo = sorted({k for k in keys if k not in self.outputs and k in INPUTS and INPUTS[k].cheap})
        if not todo:
            return
        for key, lines in _in_threads(self._run, todo, 8).items():
            self.outputs[key] = lines

    def out(self, key: str) -> list[str]:
        """An input's output lines (read now if not yet read)."""
        if key not in self.outputs:
            self.outputs[key] = self._run(key)
        return self.outputs[key]

    def read(self, source: Input[T]) -> T:
        """What ``source`` read, parsed by its reading (once)."""
        if source.key not in self._parsed:
            self._parsed[source.key] = source.reading.parse(self.out(source.key))
        value: T = self._parsed[source.key]
        return value

    def charge(self, keys: Iterable[str]) -> float:
        """Reading time to book on the first check that reads each input."""
        total = 0.0
        for key in keys:
            if key not in self._charged:
                self._charged.add(key)
                total += self.durations.get(key, 0.0)
        return total

    # -- shared readings

    def pci(self) -> NvidiaPciInfo:
        """NVIDIA devices on the bus: lspci when installed, else sysfs."""
        info = self.read(LSPCI)
        return info if info["readable"] else self.read(SYSFS_PCI)

    def smi(self) -> NvidiaSmiGpuInfo:
        return self.read(SMI)

    def unit(self, name: str) -> UnitState | None:
        """The state systemd reports for ``name`` (None: it reported nothing for it)."""
        return self.read(UNITS)["units"].get(name)


def _in_threads(run: Callable[[str], list[str]], keys: list[str], workers: int) -> dict[str, list[str]]:
    """``run`` on every key, at most ``workers`` at a time (plain threads: concurrent.futures, with
    the logging it imports, would be a sixth of the node program's start-up). A key whose ``run`` raises
    is left out, not lost with its thread: the check that reads it reads it again and reports why."""
    pending = iter(keys)
    take = threading.Lock()
    done: dict[str, list[str]] = {}

    def worker() -> None:
        while True:
            with take:
                key = next(pending, None)
            if key is None:
                return
            try:
                done[key] = run(key)
            except Exception:  # read again by the check that needs it, which reports the error
                continue

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(workers, len(keys)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done
