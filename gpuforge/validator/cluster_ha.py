"""``scheduler.controllers``: which controller is primary, and that every controller answers (two
controllers; a single one is ``scheduler.slurmctld``'s, with no extra round trip).

``scontrol ping`` (run on the first controller that answers SSH, in slurm.conf's order) prints one
line per ``SlurmctldHost``: ``Slurmctld(primary) at ctl1 is UP``, ``Slurmctld(backup) at ctl2 is UP``
(``gpuforge.spec.slurm_ha.parse_ping``; the format is cited there). Each controller's row of the
report says its place (primary, backup) and whether it answers; a controller that does not answer,
or a slurm.conf whose controllers are not the spec's in the spec's order, fails the check.
"""

from __future__ import annotations

from typing import Any

from gpuforge.spec import Role, Spec
from gpuforge.spec.nodes import Node, nodes_with
from gpuforge.spec.slurm_ha import parse_ping
from gpuforge.validator.cluster import GATHERERS, ClusterData, Gatherer, NodeRun, cluster_check
from gpuforge.validator.node.base import BLOCKED, CRITICAL, FAIL, PASS, Outcome

CONTROLLERS = "scheduler.controllers"
PING_TIMEOUT_S = 20
PING = f'timeout {PING_TIMEOUT_S} scontrol ping 2>&1; echo "__rc=$?"'


def read_ping(data: ClusterData, run: NodeRun) -> dict[str, Any]:
    """``scontrol ping`` from the first controller that answers: {from, pings, error}."""
    errors: list[str] = []
    if len(nodes_with(data.spec, Role.CONTROLLER)) < 2:
        return {"from": None, "pings": [], "error": None}  # one controller: scheduler.slurmctld checks it
    for ctl in nodes_with(data.spec, Role.CONTROLLER):
        rc, out, err = run(ctl, PING)
        if rc in (255, 124):
            errors.append(f"{ctl.name}: {(err or out).strip()[-200:] or f'exit {rc}'}")
            continue
        pings = parse_ping(out)
        if not pings:
            tail = " | ".join(x for x in out.splitlines()[-3:] if x.strip() and not x.startswith("__rc="))
            return {
                "from": ctl.name,
                "pings": [],
                "error": f"scontrol ping on {ctl.name} printed no controller: {tail}",
            }
        return {"from": ctl.name, "pings": pings, "error": None}
    return {"from": None, "pings": [], "error": "no controller answered SSH: " + "; ".join(errors)}


GATHERERS.append(Gatherer("ha", frozenset({CONTROLLERS}), read_ping))


def gate_controller(spec: Spec, node: Node) -> str | None:
    if spec.slurm is None:
        return "not a Slurm cluster"
    if len(nodes_with(spec, Role.CONTROLLER)) < 2:
        return "one controller (no failover): scheduler.slurmctld checks it"
    return None if node.has(Role.CONTROLLER) else "not a controller"


def judge_controller(spec_order: list[str], pings: list[tuple[str, str, bool]], node: str) -> Outcome:
    """One controller's row: its place in slurm.conf against the spec's order, and whether it answers."""
    seen = [host for _, host, _ in pings]
    summary = ", ".join(f"{mode} {host} {'UP' if up else 'DOWN'}" for mode, host, up in pings)
    if seen != spec_order:
        return FAIL, (
            f"slurm.conf's controllers are {', '.join(seen) or 'none'}, the spec's {', '.join(spec_order)} "
            f"(scontrol ping: {summary}); apply the spec (a slurmctld restart reads SlurmctldHost)"
        )
    mode, _, up = next(p for p in pings if p[1] == node)
    if up:
        return PASS, f"{mode}, answers ({summary})"
    others = [f"{m} {h}" for m, h, u in pings if u and h != node]
    control = f"{others[0]} is in control" if others else "no controller answers"
    return FAIL, f"{mode} {node} does not answer scontrol ping ({summary}): {control}"


@cluster_check(CONTROLLERS, "scheduler", CRITICAL,
               "Every controller answers scontrol ping, in the spec's order (primary first, then the backup)",
               depends_on=("connection.ssh",), gate=gate_controller)  # fmt: skip
def controllers(data: ClusterData, node: Node) -> Outcome:
    got = data.gathered.get("ha")
    if got is None:
        return BLOCKED, "scontrol ping was not run"
    if got["error"]:
        return FAIL, got["error"]
    order = [n.name for n in nodes_with(data.spec, Role.CONTROLLER)]
    return judge_controller(order, got["pings"], node.name)
