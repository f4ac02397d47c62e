"""Hot spares: which healthy spare moves into which partition, and the record of every swap.

``acceptance.spares`` declares, per partition, its size in service and its spare nodes. When a
partition has fewer nodes in service (its members that are not drained or down) than its size,
a healthy spare moves in (``scontrol update PartitionName= Nodes=``) and the swap is recorded in
``<state>/<cluster>/acceptance/spares.json``. A node replaced and later repaired goes back to the
pool once it passes acceptance (``gpuforge replace NODE --back``).

Invariants: a spare is healthy only if it passed the campaign at hand (or the latest saved one)
and is in service now; a node already in the partition is never "moved in"; at most one spare
per missing node; planning is pure (:func:`plan_moves`), the commands are
:mod:`.slurm_actions`'.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuforge.acceptance.results import campaigns_dir, write_atomic
from gpuforge.spec.acceptance import SparePool


@dataclass(frozen=True)
class SpareMove:
    """A spare moving into a partition, standing in for ``replaces`` (None: the partition was short)."""

    partition: str
    spare: str
    replaces: str | None
    reason: str


@dataclass
class SpareRecord:
    """The swaps so far: spares moved in per partition, nodes returned to the pool."""

    swaps: list[dict[str, Any]] = field(default_factory=list)
    moved_in: dict[str, list[str]] = field(default_factory=dict)
    returned: dict[str, list[str]] = field(default_factory=dict)

    def pool(self, pool: SparePool) -> list[str]:
        """The pool's spares now: the spec's and the returned ones, less those moved in."""
        names = pool.hostnames + [n for n in self.returned.get(pool.partition, []) if n not in pool.hostnames]
        return [n for n in names if n not in self.moved_in.get(pool.partition, [])]

    def add_move(self, move: SpareMove, campaign: str | None) -> None:
        self.moved_in.setdefault(move.partition, []).append(move.spare)
        self.swaps.append({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": "moved-in",
                           "partition": move.partition, "spare": move.spare, "replaces": move.replaces,
                           "reason": move.reason, "campaign": campaign})  # fmt: skip

    def add_return(self, partition: str, node: str, campaign: str | None) -> None:
        if node not in self.returned.setdefault(partition, []):
            self.returned[partition].append(node)
        if node in self.moved_in.get(partition, []):
            self.moved_in[partition].remove(node)
        self.swaps.append({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": "returned",
                           "partition": partition, "spare": node, "replaces": None, "reason": "passed acceptance",
                           "campaign": campaign})  # fmt: skip


def record_path(cluster: str, root: Path | None = None) -> Path:
    return campaigns_dir(cluster, root) / "spares.json"


def load_record(cluster: str, root: Path | None = None) -> SpareRecord:
    path = record_path(cluster, root)
    if not path.exists():
        return SpareRecord()
    doc = json.loads(path.read_text())
    return SpareRecord(doc.get("swaps", []), doc.get("moved_in", {}), doc.get("returned", {}))


def save_record(cluster: str, record: SpareRecord, root: Path | None = None) -> Path:
    path = record_path(cluster, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"swaps": record.swaps, "moved_in": record.moved_in, "returned": record.returned}
    write_atomic(path, json.dumps(doc, indent=2) + "\n")
    return path


def plan_moves(
    pools: list[SparePool],
    members: dict[str, list[str]],
    out_of_service: dict[str, str],
    healthy: set[str],
    record: SpareRecord,
) -> tuple[list[SpareMove], list[str]]:
    """The spares to move in, and why a short partition stays short (no healthy spare left).

    ``members``: each partition's nodes now; ``out_of_service``: node -> why (drained, down);
    ``healthy``: nodes that passed acceptance.
    """
    moves: list[SpareMove] = []
    notes: list[str] = []
    taken: set[str] = set()
    for pool in pools:
        now = members.get(pool.partition, [])
        in_service = [n for n in now if n not in out_of_service]
        short = pool.size - len(in_service)
        if short <= 0:
            continue
        gone = [n for n in now if n in out_of_service and n not in pool.hostnames]
        candidates = [s for s in record.pool(pool)
                      if s in healthy and s not in now and s not in out_of_service and s not in taken]  # fmt: skip
        for i in range(short):
            if i >= len(candidates):
                notes.append(f"{pool.partition}: {len(in_service)} of {pool.size} nodes in service and no healthy "
                             f"spare left (pool: {', '.join(record.pool(pool)) or 'empty'})")  # fmt: skip
                break
            replaced = gone[i] if i < len(gone) else None
            why = f"{replaced} is out of service ({out_of_service[replaced]})" if replaced else "partition short"
            moves.append(SpareMove(pool.partition, candidates[i], replaced, why))
            taken.add(candidates[i])
    return moves, notes
