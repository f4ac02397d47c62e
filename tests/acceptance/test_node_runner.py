"""The node runner: standard library only, run the way the job runs it (python3 -c BOOT, source in the
environment), with real stress-ng where this machine has it; its report read back by decode_output."""

from __future__ import annotations

import ast
import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuforge.acceptance import batch, node_runner
from gpuforge.acceptance.campaign import judge_record
from gpuforge.acceptance.parsers import ERROR, FAIL, PASS, SKIP
from gpuforge.spec import load_spec
from tests.acceptance.conftest import lab_spec

RUNNER = Path(node_runner.__file__)


def test_runner_imports_only_the_standard_library() -> None:
    tree = ast.parse(RUNNER.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names - {"__future__"} <= set(sys.stdlib_module_names), names


def run_runner(
    config: dict[str, Any], node: str = "node7", tmp: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The runner exactly as the batch script starts it: ``python3 -c BOOT`` in ``sh``, source in the environment."""
    env = {**os.environ, batch.RUNNER_ENV: batch._b64(batch.runner_source().encode()),
           batch.CONFIG_ENV: base64.b64encode(json.dumps(config).encode()).decode(), "SLURMD_NODENAME": node,
           "SLURM_JOB_ID": "4711"}  # fmt: skip
    command = f"python3 -c {__import__('shlex').quote(batch.BOOT)}"
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=120, cwd=tmp)


@pytest.mark.skipif(
    shutil.which("stress-ng") is None, reason="stress-ng is not installed here (apt-get install stress-ng)"
)
def test_real_stress_ng_through_the_runner(tmp_path: Path) -> None:
    spec = load_spec(lab_spec(tmp_path, lambda d: d.update(acceptance={"steps": {
        "cpu": {"seconds": 1}, "memory": {"seconds": 1, "percent": 2}, "health": {"enabled": False}}})))  # fmt: skip
    config = {
        "campaign": "t",
        "steps": batch.runner_steps(spec, gpus=False),
        "gpus": {},
        "keep_dir": str(tmp_path / "k"),
    }
    cp = run_runner(config, tmp=tmp_path)
    assert cp.returncode == 0, cp.stderr
    out = batch.decode_output(cp.stdout, ["node7"], labelled=False)
    assert not out.problems and list(out.reports) == ["node7"]
    report = out.reports["node7"]
    results = {r["name"]: judge_record(spec, r) for r in report["steps"]}
    assert results["cpu"].status == PASS and results["cpu"].metrics["bogo_ops_per_s"] >= 0  # a loaded host may do none
    assert results["memory"].status == PASS and "bogo_ops_per_s" in results["memory"].metrics
    kept = json.loads((tmp_path / "k" / "result-4711.json").read_text())
    assert kept["steps"][0]["argv"][:2] == ["stress-ng", "--cpu"]


def test_missing_program_gpu_step_timeout_and_cleanup(tmp_path: Path) -> None:
    victim = tmp_path / "scratch-4711"
    victim.write_text("x")
    config = {
        "campaign": "t",
        "gpus": {"node7": 0},
        "steps": [
            {"name": "disk", "argv": ["no-such-program-gf"], "timeout": 5},
            {"name": "dcgm", "argv": ["true"], "timeout": 5, "needs_gpu": True},
            {"name": "cpu", "argv": ["sleep", "30"], "timeout": 1},
            {"name": "health", "argv": ["sh", "-c", "echo hello; echo oops >&2; exit 3"], "timeout": 5,
             "cleanup": [str(tmp_path / "scratch-{job}")]},
        ],
    }  # fmt: skip
    cp = run_runner(config, tmp=tmp_path)
    report = batch.decode_output(cp.stdout, ["node7"], labelled=False).reports["node7"]
    by = {r["name"]: r for r in report["steps"]}
    assert by["disk"]["status"] == "missing" and "not installed" in by["disk"]["reason"]
    assert by["dcgm"]["status"] == "skipped"
    assert by["cpu"]["timed_out"] and by["cpu"]["rc"] is None and by["cpu"]["duration_s"] < 10
    assert (by["health"]["rc"], by["health"]["stdout"], by["health"]["stderr"]) == (3, "hello\n", "oops\n")
    assert not victim.exists()
    spec = load_spec(lab_spec(tmp_path))
    assert judge_record(spec, by["disk"]).status == ERROR
    assert judge_record(spec, by["dcgm"]).status == SKIP
    assert judge_record(spec, by["cpu"]).status == FAIL


def test_report_chunks_interleaved_with_other_output_decode() -> None:
    """srun mixes the tasks' lines: chunks of two nodes interleaved (and labelled) still decode."""
    a = node_runner.encode("node1", {"node": "node1", "steps": [], "pad": base64.b64encode(os.urandom(4000)).decode()})
    b = node_runner.encode("node2", {"node": "node2", "steps": []})
    assert len(a) > 1 and all(len(line) < 1000 for line in a)
    mixed = [f"0: {a[0]}", "srun: warning: something", f"1: {b[0]}", *(f"0: {x}" for x in a[1:]), "GFSTEP nodes rc=0"]
    out = batch.decode_output("\n".join(mixed), ["node1", "node2"])
    assert set(out.reports) == {"node1", "node2"} and out.steps["nodes"] == {"rc": 0}
    broken = batch.decode_output("\n".join(f" 0: {x}" for x in a[:-1]), ["node1"])
    assert not broken.reports and "incomplete" in broken.problems[0]
