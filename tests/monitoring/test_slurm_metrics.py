"""The Slurm collector (gpuforge/probes/slurm_metrics.py): pure parsers of sinfo/squeue/scontrol output
(recorded outputs of the explicit -o formats in, data out), the textfile it writes, atomically."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuforge.probes import slurm_metrics as sm

# sinfo -h -N -o '%N|%T|%E' (node1 is in two partitions: listed twice).
SINFO = """\
node1|mixed|none
node1|mixed|none
node2|drained|gpuforge: health: munge.daemon failed
node3|idle*|none
node4|draining|ops: swap PSU
node5|down*|Not responding
node6|allocated+|none
node7|completing|none
node8|future|none
node9|fail|reason with | a bar
"""


def test_parse_sinfo() -> None:
    assert sm.parse_sinfo(SINFO) == {
        "node1": ("mix", ""),
        "node2": ("drain", "gpuforge: health: munge.daemon failed"),
        "node3": ("idle", ""),
        "node4": ("drain", "ops: swap PSU"),
        "node5": ("down", "Not responding"),
        "node6": ("alloc", ""),
        "node7": ("alloc", ""),
        "node8": ("other", ""),
        "node9": ("down", "reason with | a bar"),
    }


@pytest.mark.parametrize(
    ("state", "cls"),
    [("IDLE", "idle"), ("idle~", "idle"), ("mixed-", "mix"), ("drained*", "drain"), ("reserved", "other")],
)
def test_state_class(state: str, cls: str) -> None:
    assert sm.state_class(state) == cls


def test_parse_sinfo_rejects_another_format() -> None:
    with pytest.raises(ValueError, match="sinfo line without 3 fields: 'node1 idle'"):
        sm.parse_sinfo("node1 idle\n")


def test_parse_squeue() -> None:
    text = "batch|research|PENDING\nbatch|research|PENDING\nbatch|ops|RUNNING\ngpu,debug|research|RUNNING\n\n"
    assert sm.parse_squeue(text) == {
        ("batch", "ops", "running"): 1,
        ("batch", "research", "pending"): 2,
        ("gpu,debug", "research", "running"): 1,
    }
    with pytest.raises(ValueError, match="squeue line without 3 fields"):
        sm.parse_squeue("batch research PENDING\n")


def test_parse_scontrol_nodes() -> None:
    text = (
        "NodeName=gpu001 Arch=x86_64 CoresPerSocket=56 Gres=gpu:h100:8 State=MIXED "
        "CfgTRES=cpu=224,mem=2000000M,billing=224,gres/gpu=8,gres/gpu:h100=8 "
        "AllocTRES=cpu=32,mem=256000M,gres/gpu=3,gres/gpu:h100=3 Reason=none\n"
        "NodeName=node1 Arch=x86_64 Gres=(null) State=IDLE CfgTRES=cpu=1,mem=1000M,billing=1 AllocTRES= \n"
    )
    assert sm.parse_scontrol_nodes(text) == {"gpu001": (3, 8), "node1": (0, 0)}


def test_metrics_text() -> None:
    text = sm.metrics_text(
        {"node1": ("drain", 'ops: "quoted"')},
        {("batch", "research", "pending"): 2},
        {"node1": (1, 4)},
        {"slurmctld": True, "slurmdbd": False},
        now=1700000000.5,
    )
    labels = 'slurm_node="node1",state="{}",reason="ops: \\"quoted\\""'
    assert text.splitlines() == [
        "# HELP gpuforge_slurm_node_state 1 for the node's state class (idle/alloc/mix/drain/down/other), "
        "with its reason.",
        "# TYPE gpuforge_slurm_node_state gauge",
        *(f"gpuforge_slurm_node_state{{{labels.format(s)}}} {int(s == 'drain')}" for s in sm.STATES),
        "# HELP gpuforge_slurm_jobs Jobs by partition, account and state (pending/running).",
        "# TYPE gpuforge_slurm_jobs gauge",
        'gpuforge_slurm_jobs{partition="batch",account="research",state="pending"} 2',
        "# HELP gpuforge_slurm_gpus_allocated GPU GRES allocated to jobs on the node.",
        "# TYPE gpuforge_slurm_gpus_allocated gauge",
        'gpuforge_slurm_gpus_allocated{slurm_node="node1"} 1',
        "# HELP gpuforge_slurm_gpus_total GPU GRES configured on the node.",
        "# TYPE gpuforge_slurm_gpus_total gauge",
        'gpuforge_slurm_gpus_total{slurm_node="node1"} 4',
        "# HELP gpuforge_slurm_daemon_up 1 when the Slurm daemon's systemd unit is active on this node.",
        "# TYPE gpuforge_slurm_daemon_up gauge",
        'gpuforge_slurm_daemon_up{daemon="slurmctld"} 1',
        'gpuforge_slurm_daemon_up{daemon="slurmdbd"} 0',
        "# HELP gpuforge_slurm_collector_success 1 when the source command succeeded in the last run.",
        "# TYPE gpuforge_slurm_collector_success gauge",
        'gpuforge_slurm_collector_success{source="sinfo"} 1',
        'gpuforge_slurm_collector_success{source="squeue"} 1',
        'gpuforge_slurm_collector_success{source="scontrol"} 1',
        "# HELP gpuforge_slurm_collector_last_run_timestamp_seconds When the collector last ran.",
        "# TYPE gpuforge_slurm_collector_last_run_timestamp_seconds gauge",
        "gpuforge_slurm_collector_last_run_timestamp_seconds 1700000000.500",
    ]


def test_failed_sources_are_left_out_and_reported() -> None:
    text = sm.metrics_text(None, None, None, {}, now=1.0)
    assert "gpuforge_slurm_node_state{" not in text and "gpuforge_slurm_jobs{" not in text
    assert 'gpuforge_slurm_collector_success{source="sinfo"} 0\n' in text
    accounting_only = sm.metrics_text(None, None, None, {"slurmdbd": True}, now=1.0, queue=False)
    assert "collector_success" not in accounting_only
    assert 'gpuforge_slurm_daemon_up{daemon="slurmdbd"} 1\n' in accounting_only


def test_write_atomic(tmp_path: Path) -> None:
    out = tmp_path / "slurm.prom"
    out.write_text("old\n")
    sm.write_atomic(str(out), "new\n")
    assert out.read_text() == "new\n"
    assert os.listdir(tmp_path) == ["slurm.prom"]  # no temp file left behind
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_main_with_fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The program end to end with stub commands on PATH (sinfo fails: its series are left out)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {
        "sinfo": "echo 'sinfo: error: slurm_load_node: Unable to contact slurm controller' >&2; exit 1",
        "squeue": "echo 'batch|ops|RUNNING'",
        "scontrol": "echo 'NodeName=node1 CfgTRES=cpu=1,gres/gpu=2 AllocTRES=gres/gpu=2'",
        "systemctl": 'test "$3" = slurmctld',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "slurm.prom"
    rc = sm.main(["--queue", f"--out={out}", "--daemons=slurmctld,slurmdbd"])
    text = out.read_text()
    assert rc == 1
    assert 'gpuforge_slurm_collector_success{source="sinfo"} 0\n' in text
    assert 'gpuforge_slurm_jobs{partition="batch",account="ops",state="running"} 1\n' in text
    assert 'gpuforge_slurm_gpus_allocated{slurm_node="node1"} 2\n' in text
    assert 'gpuforge_slurm_daemon_up{daemon="slurmctld"} 1\n' in text
    assert 'gpuforge_slurm_daemon_up{daemon="slurmdbd"} 0\n' in text


def test_stdlib_only() -> None:
    """The program runs on nodes with only python3: it imports nothing outside the standard library."""
    import ast
    import sys

    tree = ast.parse(Path(sm.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names - {"__future__"} <= set(sys.stdlib_module_names)
