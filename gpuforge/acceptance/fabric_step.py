"""The campaign's ``fabric`` step: the validator's pair test (``fabric.pairs``) on the nodes the campaign tested.

After the campaign's jobs have ended, the nodes that ran them are validated with ``--checks
fabric.pairs`` over the campaign's own transport: the node checks it relies on (``fabric.devices``,
``fabric.ports``) run on each node, then perftest (and NCCL) between pairs of nodes within each leaf
switch (:mod:`gpuforge.validator.cluster_fabric`). Each node gets one ``fabric`` step: ``pass`` and
``fail`` as the pair test judged it (a node whose devices or ports failed fails, naming them),
``skip`` where its group has no fabric or it has no partner, ``error`` where the node could not be
reached or the test could not run (never drained).
"""

from __future__ import annotations

from collections.abc import Callable

from gpuforge.acceptance.parsers import ERROR, FAIL, PASS, SKIP, StepResult
from gpuforge.acceptance.results import Campaign
from gpuforge.spec.cluster import Cluster as Loaded
from gpuforge.validator.cluster import CONNECTION
from gpuforge.validator.cluster_fabric import PAIRS
from gpuforge.validator.node.base import BLOCKED
from gpuforge.validator.node.framework import Result
from gpuforge.validator.report import NodeReport
from gpuforge.validator.runner import Transport, validate

STEP = "fabric"
#: The node checks the pair test depends on: their failure is the node's.
NODE_FAULTS = ("fabric.devices", "fabric.ports")


def _node_step(node: NodeReport) -> StepResult:
    by_id: dict[str, Result] = {r.id: r for r in node.checks}
    conn = by_id.get(CONNECTION.id)
    if conn is not None and conn.status != PASS:
        return StepResult(STEP, ERROR, f"not reached: {conn.message}")
    faults = [by_id[c] for c in NODE_FAULTS if c in by_id and by_id[c].status == FAIL]
    if faults:
        return StepResult(STEP, FAIL, f"{faults[0].id}: {faults[0].message}")
    pairs = by_id.get(PAIRS)
    if pairs is None:
        return StepResult(STEP, ERROR, "the pair test reported nothing for this node")
    if pairs.status == BLOCKED:
        return StepResult(STEP, ERROR, pairs.message, {}, pairs.duration_s)
    status = {PASS: PASS, FAIL: FAIL, SKIP: SKIP}.get(pairs.status, ERROR)
    return StepResult(STEP, status, pairs.message, {}, pairs.duration_s)


def fabric_steps(
    loaded: Loaded, transport: Transport, names: list[str], say: Callable[[str], None]
) -> dict[str, StepResult]:
    """Each of ``names``'s ``fabric`` step (none asked: none run)."""
    if not names:
        return {}
    say(f"fabric pair test on {len(names)} node(s)")
    report = validate(loaded, checks=PAIRS, limit=",".join(names), transport=transport, on_event=say)
    return {node.name: _node_step(node) for node in report.nodes}


def add_fabric_steps(camp: Campaign, steps: dict[str, StepResult]) -> None:
    """Each node's ``fabric`` step after its other steps (a node the job could not test keeps its error)."""
    for result in camp.nodes:
        if result.node in steps and not any(s.step == "job" for s in result.steps):
            result.steps.append(steps[result.node])
