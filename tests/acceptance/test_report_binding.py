"""Review item 4: a node's acceptance report counts only for the node that printed it.

A compromised node (node3 here: its health program writes to its runner's own stdout through
``/proc/$PPID/fd/1``) prints a report claiming node2 failed: on the old decoding the forged
report replaced node2's own and the campaign drained a healthy node. Reports are bound to srun's
task label (task ``i`` runs on the ``i``-th line of ``SLURM_HOSTFILE``) or, on Kubernetes, to the
pod log they came from.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuforge.acceptance import batch, kube_actions, node_runner, tools
from gpuforge.acceptance.campaign import run_campaign
from gpuforge.spec.cluster import Cluster as Loaded
from tests.acceptance.stub_slurm import StubSlurm
from tests.acceptance.test_campaign import HEALTH_STUB, fast

FORGED_STDOUT = '{"ok": false, "results": [{"id": "gpu.xid", "status": "fail", "message": "forged"}]}'
FORGED_HEALTH = {"status": "ran", "rc": 1, "duration_s": 1.0, "timed_out": False, "stderr": "", "name": "health",
                 "stdout": FORGED_STDOUT}  # fmt: skip
EVIL_HEALTH = HEALTH_STUB.replace(
    "#!/bin/sh\n", '#!/bin/sh\n[ "$SLURMD_NODENAME" = node3 ] && cat "$STUB_FORGED" > /proc/$PPID/fd/1\n', 1
)


@pytest.fixture
def evil(stub: StubSlurm, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    forged = tmp_path / "forged.txt"
    doc = {"schema": 1, "node": "node2", "steps": [FORGED_HEALTH]}
    forged.write_text("\n".join(node_runner.encode("node2", doc)) + "\n")
    stub.tool("gpuforge-health", EVIL_HEALTH)
    monkeypatch.setattr(tools, "HEALTH_PROGRAM", str(stub.bin / "gpuforge-health"))
    stub.env.update(STUB_FORGED=str(forged))
    return forged


def test_a_node_cannot_fail_another_node(stub: StubSlurm, spec_at: Callable, evil: Path) -> None:
    spec, path = spec_at(fast())
    for n in ("node1", "node2", "node3"):
        stub.set_node(n, partitions=["batch"])
    camp = run_campaign(Loaded.of(spec, path), transport=stub, poll_s=0.05)
    status = {n.node: n.status for n in camp.nodes}
    assert status["node2"] == "pass", camp.to_dict()
    assert stub.read()["nodes"]["node2"]["state"] == "idle", "a healthy node was drained on another node's word"
    note = " ".join(g.note for g in camp.groups)
    assert "node3 printed a report line for node2: dropped" in note


def test_decoding_binds_lines_to_their_task_or_log() -> None:
    own = node_runner.encode("node1", {"node": "node1", "steps": []})
    forged = node_runner.encode("node2", {"node": "node2", "steps": [FORGED_HEALTH]})
    out = batch.decode_output("\n".join([*(f"0: {x}" for x in own), *(f"0: {x}" for x in forged)]), ["node1", "node2"])
    assert list(out.reports) == ["node1"] and "node1 printed a report line for node2" in out.problems[0]
    unlabelled = batch.decode_output("\n".join(forged), ["node1", "node2"])
    assert not unlabelled.reports and "without a task label" in unlabelled.problems[0]
    fake_step = batch.decode_output("0: GFSTEP nodes rc=0\n0: GFEND 1", ["node1"])
    assert fake_step.steps == {} and not fake_step.ended, "a task cannot print the batch script's markers"
    pod = batch.decode_output("\n".join([*own, *forged]), ["node1"], labelled=False)
    assert list(pod.reports) == ["node1"] and pod.problems
    liar = node_runner.encode("node1", {"node": "node2", "steps": []})
    assert not batch.decode_output("\n".join(liar), ["node1"], labelled=False).reports


def test_a_pod_cannot_end_its_log_or_open_another_nodes() -> None:
    """The logs command prefixes each pod line; a pod printing GFLOG markers stays inside its own log."""
    pod = ["| hello", "| GFLOG n1 end rc=0", "| GFLOG n2 begin", "| forged", "| GFLOG n2 end rc=0"]
    text = "\n".join(["GFLOG n1 begin", *pod, "GFLOG n1 end rc=0", "GFLOG n2 begin", "| real", "GFLOG n2 end rc=0"])
    logs = kube_actions.parse_logs(text)
    assert logs["n2"] == ("real", 0) and logs["n1"][0].startswith("hello\nGFLOG n1 end rc=0")


def test_the_batch_script_lays_tasks_out_in_the_host_file_order(spec_at: Callable) -> None:
    spec, _ = spec_at(fast())
    group = batch.JobGroup("batch", "batch", None, ("node1", "node2"), (("node1", 0), ("node2", 0)))
    script = batch.batch_script(spec, group, "c")
    assert "printf '%s\\n' node1 node2 >\"$gfhosts\"" in script
    assert 'SLURM_HOSTFILE="$gfhosts" srun -N2 -n2 --distribution=arbitrary --label --kill-on-bad-exit=0' in script
