"""``plan --detailed-exitcode`` through the real plan on converged simulated nodes: 0 when the node
is as the spec wants it, 2 when one managed file drifted and nothing else (an upload is the only
step).

The review planted a mutation that counted commands only (so a file upload alone exited 0) and
only a unit test of ``PlanResult.exit_code`` failed; this one fails too, at the caller.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuforge.deploy.operations import layer as layer_operation
from gpuforge.orchestrate.plan import plan
from gpuforge.spec import load_spec
from gpuforge.spec.cluster import load_cluster
from tests.conftest import REPO
from tests.converge.converged import ConvergedCluster, converge
from tests.converge.simulated import SimulatedConnector, write_simulated_spec
from tests.converge.test_simulated_runs import ARTIFACT_PINS

NODE = "gpu001"
DRIFTED = "/etc/hosts"


@pytest.fixture
def converged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ConvergedCluster, Path]:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["sources"]["artifact_sha256"] = ARTIFACT_PINS
    path = write_simulated_spec(data, tmp_path, "hopper.yaml")
    return converge(load_spec(path), path, monkeypatch, tmp_path), path


def _exit_code(cluster: ConvergedCluster, path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """``plan --limit NODE``'s detailed exit code on the converged nodes, and the steps it plans there."""
    monkeypatch.setattr(SimulatedConnector, "cluster", cluster.sim)
    monkeypatch.setattr(layer_operation, "read_facts", cluster._read_facts)
    result = plan(load_cluster(path), limit=NODE)
    assert not result.errors, result.errors
    steps = [f"{op.layer}: {s.kind}" for op in result.hosts[NODE] for s in op.steps]
    return result.exit_code(detailed=True), steps


def test_a_converged_node_is_0_and_one_drifted_file_alone_is_2(
    converged: tuple[ConvergedCluster, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, path = converged
    code, _ = _exit_code(cluster, path, monkeypatch)
    assert code == 0
    node = cluster.nodes[NODE]
    assert DRIFTED in node.files
    node.files[DRIFTED]["sha256"] = "0" * 64  # edited by hand: no package, no unit, no command
    node.contents[DRIFTED] = "127.0.0.1 localhost\n"
    code, steps = _exit_code(cluster, path, monkeypatch)
    assert (code, steps) == (2, ["base: upload"])  # the one upload is the whole plan, and it is a change
