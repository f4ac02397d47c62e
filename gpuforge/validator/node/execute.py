"""Executing the checks of one node: probes in parallel, checks in dependency order."""

from __future__ import annotations

from collections.abc import Iterable

# Importing the check modules registers their checks, in this order (gpu, containers, platform, services).
import gpuforge.validator.node.checks_fabric  # noqa: F401  (the fabric checks; imports checks_gpu first)
from gpuforge.validator.node import checks_config, checks_containers, checks_platform, checks_services  # noqa: F401
from gpuforge.validator.node.base import FAIL, PASS, SKIP, Config, Outcome
from gpuforge.validator.node.checks_gpu import NO_GPU_REASON, no_gpu_reason
from gpuforge.validator.node.framework import (
    NODE_CHECKS,
    Check,
    NodeContext,
    Result,
    evaluate,
    order_checks,
    with_dependencies,
)
from gpuforge.validator.node.inputs import MANAGED_FILES, READ_MANAGED, READ_SLURM_VERSION, SLURM_VERSIONS


def select(ids: Iterable[str] | None = None, health_only: bool = False) -> list[Check]:
    """The node checks to run: ``ids`` (with their dependencies) or all; health mode drops slow ones,
    validate mode the health check's stand-ins for its own cluster checks."""
    pool = [c for c in NODE_CHECKS if (c.health if health_only else c.validate)]
    if ids is None:
        return pool
    return with_dependencies(pool, ids)


def run_node_checks(
    cfg: Config, ids: Iterable[str] | None = None, health_only: bool = False, ctx: NodeContext | None = None
) -> tuple[list[Result], NodeContext]:
    """Run the node-local checks on this machine (or on ``ctx``'s recorded outputs)."""
    ctx = ctx or NodeContext(cfg)
    checks = order_checks(select(ids, health_only))
    gates = {c.id: (c.gate(cfg) if c.gate else None) for c in checks}
    if NO_GPU_REASON in gates.values():
        reason = no_gpu_reason(ctx)
        gates = {k: (reason if v == NO_GPU_REASON else v) for k, v in gates.items()}
    # Level by level (a check's level is one more than its deepest dependency), so that the
    # probes of a check whose dependency did not pass are never read: it is not run at all.
    level: dict[str, int] = {}
    for c in checks:
        level[c.id] = 1 + max((level.get(d, -1) for d in c.depends_on), default=-1)
    results: dict[str, Result] = {}
    for depth in range(max(level.values(), default=-1) + 1):
        batch = [c for c in checks if level[c.id] == depth]
        ready = [
            c
            for c in batch
            if not gates[c.id] and all(results.get(d) is not None and results[d].status == PASS for d in c.depends_on)
        ]
        ctx.prefetch(k for c in ready for k in c.needs)
        for c in batch:

            def call(c: Check = c) -> Outcome:
                return c.fn(ctx)

            r = evaluate(c, gates[c.id], results, call)
            if r.status in (PASS, FAIL, SKIP) and not gates[c.id]:
                r.duration_s = round(r.duration_s + ctx.charge(c.needs), 4)
            results[c.id] = r
    if cfg.get(READ_MANAGED):  # validate's config layer: the digests, judged on the control host
        ctx.data[MANAGED_FILES.key] = dict(ctx.read(MANAGED_FILES)["files"])
    if cfg.get(READ_SLURM_VERSION):  # validate's scheduler.slurm_version, judged on the control host
        versions = ctx.read(SLURM_VERSIONS)
        ctx.data[SLURM_VERSIONS.key] = {**versions}
    return [results[c.id] for c in checks], ctx
