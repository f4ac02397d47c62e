"""``gpuforge replace NODE`` on Kubernetes: cordon and taint NODE, label a healthy spare into its group.

As on Slurm (:func:`gpuforge.acceptance.replace.replace_node`): NODE is cordoned and tainted with
the ``gpuforge: replace:`` reason unless someone else holds it (their cordon is kept as it is, and
the spare still comes in); the spare is one that passed the latest saved campaign and is in service
now; the swap is recorded in the same spare record. ``--back`` (test the repaired node and return
it to the pool) is Slurm only for now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuforge.acceptance import kube_campaign, kube_nodes, slurm_actions, spares
from gpuforge.acceptance.campaign import Cluster
from gpuforge.acceptance.replace import Outcome, latest_healthy
from gpuforge.spec import Spec


def replace_node(cluster: Cluster, spec: Spec, node: str, root: Path | None = None) -> Outcome:
    """Cordon and taint ``node`` and label a healthy spare into its node group; the swap recorded."""
    record = spares.load_record(spec.cluster.name, root)
    views, error = kube_campaign.read_nodes(cluster, spec)
    if error:
        return Outcome(False, f"kubectl get nodes failed: {error}")
    members = kube_campaign.group_members(spec, views, record)
    pool = next((p for p in spec.acceptance.spares if node in members.get(p.partition, [])), None)
    if pool is None:
        raise ValueError(f"{node} is in no node group with spares (acceptance.spares: "
                         f"{', '.join(p.partition for p in spec.acceptance.spares)})")  # fmt: skip
    reason = slurm_actions.reason_text(slurm_actions.REPLACE_TAG, "taken out by gpuforge replace")
    done = cluster.run(kube_nodes.cordon_command(node, reason, "replace"))
    word, rest = slurm_actions.parse_marks(done.stdout, "GFCORDON").get(node, ("error", f"exit {done.rc}"))
    actions: list[dict[str, Any]] = [{"action": "cordon", "node": node, "reason": reason,
                                      "result": word + (f": {rest}" if rest else "")}]  # fmt: skip
    if word == "error":
        return Outcome(False, f"{node} could not be cordoned: {rest}", actions)
    out = {n: v.why_out() for n, v in views.items() if not v.in_service}
    out.setdefault(node, "cordoned by gpuforge replace")
    size = len(members[pool.partition]) - (1 if node not in members[pool.partition] else 0)
    short = pool.model_copy(update={"size": size})
    moves, notes = spares.plan_moves([short], members, out, latest_healthy(spec, root), record)
    if not moves:
        return Outcome(False, "; ".join(notes) or f"no healthy spare for {pool.partition}", actions)
    move = spares.SpareMove(pool.partition, moves[0].spare, node, f"gpuforge replace {node}")
    present = [t for t in pool.spare_taints if views[move.spare].has_taint(t)]
    done = cluster.run(kube_nodes.spare_in_command(move.spare, dict(pool.labels), present))
    word, rest = slurm_actions.parse_marks(done.stdout, "GFSPARE").get(move.spare, ("error", f"exit {done.rc}"))
    actions.append({"action": "spare-in", "partition": pool.partition, "spare": move.spare, "replaces": node,
                    "result": "moved" if word == "moved" else f"error: {rest}"})  # fmt: skip
    if word != "moved":
        return Outcome(False, f"spare {move.spare} could not join {pool.partition}: {rest}", actions)
    record.add_move(move, None)
    spares.save_record(spec.cluster.name, record, root)
    return Outcome(True, f"{node} replaced by {move.spare} in {pool.partition}", actions)
