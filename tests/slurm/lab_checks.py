"""Checks the lab tests of whole Slurm bring-ups share (three nodes, the lab spec's users)."""

from __future__ import annotations

from tests.conftest import LabCluster


def a_job_runs_on_all_three_and_is_accounted(c: LabCluster) -> None:
    """A job of the spec user alice runs on node1..node3 through srun, and sacct shows it COMPLETED on 3 nodes."""
    out = c.ssh("node1", "cd /tmp && runuser -u alice -- srun -N3 -t 1 hostname | sort")
    assert out.split() == ["node1", "node2", "node3"], out
    accounted = c.ssh("node1", "sacct -X -n -P -u alice -o JobID,State,NNodes --starttime now-1hour")
    assert any(line.endswith("|COMPLETED|3") for line in accounted.splitlines()), accounted
