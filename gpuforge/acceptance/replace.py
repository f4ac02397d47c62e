"""Hot-spare operations on a live cluster: refill short partitions, ``gpuforge replace NODE [--back]``.

- :func:`restore_capacity` (after a campaign): each partition with spares that has fewer nodes in
  service than its size gets healthy spares moved in (passed this campaign, in service now).
- :func:`replace_node`: drain NODE (``gpuforge: replace:``; an operator's drain is kept as it is)
  and move a healthy spare (passed the latest saved campaign, in service now) into its partition.
- :func:`return_node`: NODE is repaired: test it alone in a maintenance reservation (resumed only
  if gpuforge drained it, never someone else's drain); if it passes, it leaves the partition for
  the spare pool (added to the partition the pool's spares are in); if not, it is drained again.

Every move is recorded (:mod:`.spares`); Slurm's partition change is runtime state: a restart of
slurmctld or ``scontrol reconfigure`` after an apply reads slurm.conf again (docs/acceptance.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuforge.acceptance import results, slurm_actions, spares
from gpuforge.acceptance.campaign import Cluster
from gpuforge.acceptance.parsers import PASS
from gpuforge.spec import Spec
from gpuforge.spec.acceptance import SparePool

Say = Callable[[str], None]


@dataclass
class Outcome:
    """What an operation did; ``ok`` False with ``message`` when it could not (exit 1), bad input raises ValueError."""

    ok: bool
    message: str
    actions: list[dict[str, Any]] = field(default_factory=list)


def _snapshot(
    cluster: Cluster, pools: list[SparePool], extra: list[str]
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Each pool's partition members now, and every relevant node that is out of service (with why)."""
    members = slurm_actions.parse_partitions(cluster.run(slurm_actions.partitions_command(
        sorted({p.partition for p in pools}))).stdout)  # fmt: skip
    names = sorted({n for m in members.values() for n in m} | {n for p in pools for n in p.hostnames} | set(extra))
    states = slurm_actions.parse_states(cluster.run(slurm_actions.states_command(names)).stdout) if names else {}
    out = {n: f"{st.state}{f': {st.reason}' if st.reason else ''}" for n, st in states.items() if not st.in_service}
    return members, out


def _move(cluster: Cluster, move: spares.SpareMove, members: dict[str, list[str]]) -> tuple[bool, str]:
    new = [*members.get(move.partition, []), move.spare]
    done = cluster.run(slurm_actions.set_partition_command(move.partition, new))
    if done.rc != 0:
        return False, " ".join((done.stderr or done.stdout).split())[:200] or f"exit {done.rc}"
    members[move.partition] = new
    return True, ""


def restore_capacity(cluster: Cluster, spec: Spec, camp: results.Campaign, root: Path | None = None,
                     say: Say = lambda _: None) -> None:  # fmt: skip
    """Move healthy spares into short partitions; record each move in the campaign and the spare record."""
    pools = spec.acceptance.spares
    if not pools:
        return
    record = spares.load_record(spec.cluster.name, root)
    members, out = _snapshot(cluster, pools, [])
    healthy = {n.node for n in camp.nodes if n.status == PASS}
    moves, notes = spares.plan_moves(pools, members, out, healthy, record)
    camp.problems += notes
    for move in moves:
        ok, error = _move(cluster, move, members)
        action = {"action": "spare-in", "partition": move.partition, "spare": move.spare, "replaces": move.replaces,
                  "reason": move.reason, "result": "moved" if ok else f"error: {error}"}  # fmt: skip
        camp.actions.append(action)
        if ok:
            record.add_move(move, camp.id)
        say(f"{move.partition}: spare {move.spare} " + ("moved in" if ok else f"not moved: {error}"))
    if moves:
        spares.save_record(spec.cluster.name, record, root)


def pool_of(spec: Spec, members: dict[str, list[str]], node: str) -> SparePool:
    """The spare pool of the partition ``node`` is in now (ValueError: none)."""
    for pool in spec.acceptance.spares:
        if node in members.get(pool.partition, []):
            return pool
    raise ValueError(f"{node} is in no partition with spares (acceptance.spares: "
                     f"{', '.join(p.partition for p in spec.acceptance.spares) or 'none'})")  # fmt: skip


def latest_healthy(spec: Spec, root: Path | None) -> set[str]:
    """The nodes that passed the latest saved campaign of the cluster."""
    path = results.latest(spec.cluster.name, root)
    if path is None:
        return set()
    doc = json.loads(path.read_text())
    return {n["node"] for n in doc.get("nodes", []) if n.get("status") == PASS}


def replace_node(cluster: Cluster, spec: Spec, node: str, root: Path | None = None,
                 say: Say = lambda _: None) -> Outcome:  # fmt: skip
    """Drain ``node`` and move a healthy spare into its partition; the swap recorded."""
    spec = cluster.spec
    members, out = _snapshot(cluster, spec.acceptance.spares, [node])
    pool = pool_of(spec, members, node)
    reason = slurm_actions.reason_text(slurm_actions.REPLACE_TAG, "taken out by gpuforge replace")
    done = cluster.run(slurm_actions.drain_command(node, reason))
    word, rest = slurm_actions.parse_marks(done.stdout, "GFDRAIN").get(node, ("error", f"exit {done.rc}"))
    actions: list[dict[str, Any]] = [{"action": "drain", "node": node, "reason": reason, "result": word + (
        f": {rest}" if rest else "")}]  # fmt: skip
    if word == "error":
        return Outcome(False, f"{node} could not be drained: {rest}", actions)
    out.setdefault(node, "drained by gpuforge replace")
    record = spares.load_record(spec.cluster.name, root)
    healthy = latest_healthy(spec, root)
    short_pool = SparePool(partition=pool.partition, nodes=pool.nodes, size=len(members[pool.partition]) - (
        1 if node not in members[pool.partition] else 0))  # fmt: skip
    moves, notes = spares.plan_moves([short_pool], members, out, healthy, record)
    moves = [spares.SpareMove(m.partition, m.spare, node, f"gpuforge replace {node}") for m in moves[:1]]
    if not moves:
        return Outcome(False, "; ".join(notes) or f"no healthy spare for {pool.partition}", actions)
    ok, error = _move(cluster, moves[0], members)
    actions.append({"action": "spare-in", "partition": pool.partition, "spare": moves[0].spare, "replaces": node,
                    "result": "moved" if ok else f"error: {error}"})  # fmt: skip
    if not ok:
        return Outcome(False, f"spare {moves[0].spare} could not move into {pool.partition}: {error}", actions)
    record.add_move(moves[0], None)
    spares.save_record(spec.cluster.name, record, root)
    say(f"{node} drained; spare {moves[0].spare} moved into {pool.partition}")
    return Outcome(True, f"{node} replaced by {moves[0].spare} in {pool.partition}", actions)


def _join_pool_partitions(cluster: Cluster, pool: SparePool, node: str) -> None:
    """Add ``node`` to the partitions the pool's spares are in (where the campaign tests spares)."""
    states = slurm_actions.parse_states(cluster.run(slurm_actions.states_command(pool.hostnames)).stdout)
    parts = sorted({p for n in pool.hostnames if n in states for p in states[n].partitions} - {pool.partition})
    if not parts:
        return
    now = slurm_actions.parse_partitions(cluster.run(slurm_actions.partitions_command(parts)).stdout)
    for part, members in now.items():
        if node not in members:
            cluster.run(slurm_actions.set_partition_command(part, [*members, node]))


def return_node(cluster: Cluster, node: str, root: Path | None = None,
                say: Say = lambda _: None, poll_s: float = 5.0) -> tuple[Outcome, results.Campaign | None]:  # fmt: skip
    """Test a repaired ``node`` alone in a maintenance reservation; passed: back to the spare pool."""
    from gpuforge.acceptance.campaign import run_campaign

    spec = cluster.spec
    members, out = _snapshot(cluster, spec.acceptance.spares, [node])
    pool = pool_of(spec, members, node)
    name = f"gpuforge-accept-{node}"
    create, delete = slurm_actions.reservation_commands(name, [node], 24 * 60)
    made = cluster.run(create)
    if made.rc != 0:
        return Outcome(False, f"reservation {name}: {' '.join((made.stderr or made.stdout).split())[:200]}"), None
    try:
        resumed = cluster.run(slurm_actions.resume_command(node))
        word, rest = slurm_actions.parse_marks(resumed.stdout, "GFRESUME").get(node, ("error", ""))
        if word != "resumed" and node in out:
            return Outcome(False, f"{node} stays out of service: {rest or out[node]} (not drained by gpuforge)"), None
        camp = run_campaign(cluster.loaded, names=[node], transport=cluster.transport, say=say, poll_s=poll_s,
                            reservation=name)  # fmt: skip
    finally:
        cluster.run(delete)
    result = camp.node(node)
    if result is None or result.status != PASS:
        return Outcome(False, f"{node} did not pass ({result.status if result else 'not tested'}): it stays "
                              "drained", camp.actions), camp  # fmt: skip
    keep = [n for n in members[pool.partition] if n != node]
    done = cluster.run(slurm_actions.set_partition_command(pool.partition, keep))
    if done.rc != 0:
        return Outcome(False, f"{node} passed but could not leave {pool.partition}: exit {done.rc}"), camp
    _join_pool_partitions(cluster, pool, node)
    record = spares.load_record(spec.cluster.name, root)
    record.add_return(pool.partition, node, camp.id)
    spares.save_record(spec.cluster.name, record, root)
    return Outcome(True, f"{node} passed and is back in the {pool.partition} spare pool",
                   [{"action": "spare-out", "partition": pool.partition, "node": node}]), camp  # fmt: skip
