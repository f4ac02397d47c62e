"""The ``acceptance`` section: documented defaults, typed values, and bad input refused naming the field (exit 2)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuforge.acceptance import batch, tools
from gpuforge.spec import load_spec
from tests.acceptance.conftest import lab_spec
from tests.conftest import REPO, run_cli


def test_defaults(tmp_path: Path) -> None:
    acc = load_spec(lab_spec(tmp_path)).acceptance
    st = acc.steps
    assert (st.cpu.seconds, st.cpu.workers, st.memory.percent, st.dcgm.level, st.disk.enabled) == (60, 0, 50, 3, False)
    assert (st.nccl.min_bytes, st.nccl.max_bytes, st.container.image, st.fabric.enabled) == (
        "8",
        "8G",
        "ubuntu:24.04",
        False,
    )
    assert (acc.outliers.margin_percent, acc.outliers.mad_threshold, acc.outliers.min_group) == (10.0, 3.0, 3)
    assert acc.group_by.value == "partition" and acc.spares == [] and acc.drain_failed


def test_commands_are_the_cited_ones(tmp_path: Path) -> None:
    disk = {"enabled": True, "directory": "/scratch/local", "direct": False}
    spec = load_spec(lab_spec(tmp_path, lambda d: d.update(acceptance={"steps": {"disk": disk, "dcgm": {"level": 4}}})))
    st = spec.acceptance.steps
    assert tools.stress_cpu(st.cpu) == ["stress-ng", "--cpu", "0", "--timeout", "60s", "--metrics-brief"]
    assert tools.stress_memory(st.memory) == ["stress-ng", "--vm", "1", "--vm-bytes", "50%", "--timeout", "60s",
                                              "--metrics-brief"]  # fmt: skip
    assert tools.dcgm_diag(st.dcgm) == ["dcgmi", "diag", "-r", "4", "-j"]
    assert tools.nccl_node(st.nccl) == ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "{gpus}"]
    assert "--filename={scratch}/gpuforge-accept.fio" in tools.fio(st.disk)
    [disk_step] = [x for x in batch.runner_steps(spec, gpus=False) if x["name"] == "disk"]
    assert disk_step["scratch_in"] == "/scratch/local"  # the runner's mkdtemp there, removed after
    assert "--direct=0" in tools.fio(st.disk) and "--output-format=json" in tools.fio(st.disk)
    assert {"stress-ng", "fio", "dcgmi-diag", "nccl-tests", "pyxis", "sbatch", "scontrol"} <= set(tools.SOURCES)


def test_gpu_groups_get_gpu_steps_and_the_leaf_run(tmp_path: Path) -> None:
    spec = load_spec(REPO / "inventories" / "slurm-h100.yaml")
    groups = batch.plan_groups(spec, batch.campaign_nodes(spec))
    gpu = next(g for g in groups if g.gpu_nodes)
    script = batch.batch_script(spec, gpu, "c1")
    assert "--mpi=pmix all_reduce_perf -b 8 -e 8G -f 2 -g 1" in script
    assert f"srun -N{len(gpu.nodes)} --ntasks-per-node=1 --kill-on-bad-exit=0 --container-image=ubuntu:24.04" in script
    names = [s["name"] for s in batch.runner_config(spec, gpu, "c1")["steps"]]
    assert names == ["health", "cpu", "memory", "dcgm", "nccl_node"]


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("image", {"steps": {"container": {"image": "ubuntu;reboot"}}}, "acceptance.steps.container.image"),
    ("dir", {"steps": {"disk": {"directory": "var/tmp"}}}, "acceptance.steps.disk.directory"),
    ("dotdot", {"steps": {"disk": {"directory": "/var/../etc"}}}, "acceptance.steps.disk.directory"),
    ("command", {"steps": {"nccl": {"command": "-rf"}}}, "acceptance.steps.nccl.command"),
    ("size", {"steps": {"nccl": {"max_bytes": "8T"}}}, "acceptance.steps.nccl.max_bytes"),
    ("level", {"steps": {"dcgm": {"level": 2}}}, "acceptance.steps.dcgm.level"),
    ("margin", {"outliers": {"margin_percent": 0}}, "acceptance.outliers.margin_percent"),
    ("fabric", {"steps": {"fabric": {"enabled": True}}}, "needs a node group with a fabric (node_groups[].fabric)"),
    ("unknown", {"steps": {"gpu_burn": {}}}, "acceptance.steps.gpu_burn"),
    ("spare-partition", {"spares": [{"partition": "gpu", "nodes": "node3", "size": 1}]}, "no partition 'gpu'"),
    (
        "spare-member",
        {"spares": [{"partition": "batch", "nodes": "node3", "size": 1}]},
        "node3 is already in partition",
    ),
    ("spare-unknown", {"spares": [{"partition": "batch", "nodes": "node9", "size": 1}]}, "node9 is not a compute node"),
]


@pytest.mark.parametrize(("case", "section", "expect"), BAD, ids=[b[0] for b in BAD])
def test_bad_values_exit_2_naming_the_field(tmp_path: Path, case: str, section: dict[str, Any], expect: str) -> None:
    path = lab_spec(tmp_path, lambda d: d.update(acceptance=section))
    cp = run_cli("check", str(path))
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert expect in cp.stderr and "Traceback" not in cp.stderr


def test_a_valid_spare_pool_passes(tmp_path: Path, spec_at: Callable) -> None:
    spec, _ = spec_at(lambda d: (
        d["slurm"].update(partitions=[{"name": "batch", "nodes": "node[1-2]", "default": True},
                                      {"name": "spare", "nodes": "node3"}]),
        d.update(acceptance={"spares": [{"partition": "batch", "nodes": "node3", "size": 2}]})))  # fmt: skip
    assert spec.acceptance.spares[0].hostnames == ["node3"]
