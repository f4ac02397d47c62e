"""slurmd's config hash as the controller sees it (``config.slurm_conf_hash``): a node whose
running slurmd parsed another slurm.conf than slurmctld's, as slurmctld's log says.

A logged mismatch is current when it came after the node's slurmd last started
(``SlurmdStartTime``) and after slurmctld's own last start or completed reconfigure: each of
those makes the node register again, and a registration with the same hash logs nothing.
"""

from __future__ import annotations

from gpuforge.probes.slurm_log import MISMATCH, ConfHashLog
from gpuforge.spec.nodes import Node
from gpuforge.validator.cluster import ClusterData, cluster_check, gate_slurm_compute
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, SKIP, Outcome


def current_mismatches(log: ConfHashLog, slurmd_started: dict[str, str]) -> dict[str, str]:
    """Node -> the time of a mismatch its running slurmd still has (ISO times compare as text)."""
    out = {}
    for name, when in log["mismatched"].items():
        started = slurmd_started.get(name) or ""
        if when >= (log["reread"] or "") and when >= started:
            out[name] = when
    return out


@cluster_check("config.slurm_conf_hash", "config", CRITICAL,
               "slurmctld logged no slurm.conf hash mismatch for the node's running slurmd",
               gate=gate_slurm_compute)  # fmt: skip
def slurm_conf_hash(data: ClusterData, node: Node) -> Outcome:
    log = data.conf_hash_log
    if log is None:
        return SKIP, data.slurm_error or "the controller's log was not read"
    if log["error"]:  # e.g. validate's SSH user may not read slurmctld's log
        return SKIP, f"{log['error']}: the controller's view of the node's slurm.conf hash is unknown"
    when = current_mismatches(log, data.slurmd_started).get(node.name)
    if when:
        return FAIL, (
            f"slurmctld logged at {when} that {node.name} {MISMATCH} (its running slurmd parsed another "
            "slurm.conf): 'gpuforge apply' restores the file and reconfigures"
        )
    return PASS, f"slurmctld logged no slurm.conf mismatch for {node.name}'s running slurmd"
