"""``--limit`` selects by hostlist, node group and role, with ``!`` to leave nodes out; a limit that
names no node is exit 2 before anything connects. ``plan --detailed-exitcode`` follows Terraform
(0 no change, 1 error, 2 changes pending); ``apply`` exits 3 when nodes wait for an operator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuforge.cli_apply import apply_exit_code
from gpuforge.deploy.converge import Step, StepKind
from gpuforge.deploy.run import ApplyResult, HostResult
from gpuforge.deploy.runstate import PlannedOp
from gpuforge.orchestrate.plan import PlanResult
from gpuforge.render.files import RenderedFile
from gpuforge.spec import SpecError, select_limit
from tests import yaml_text
from tests.helpers import INVENTORIES, REPO, inventory

H100 = inventory("slurm-h100")


@pytest.mark.parametrize(
    ("selector", "first", "count"),
    [
        ("compute", "gpu001", 64),  # a role
        ("mig", "gpu061", 4),  # a node group
        ("gpu[001-003],!gpu002", "gpu001", 2),  # a hostlist less one node
        ("!gpu,!mig", "ctl01", 5),  # only exclusions: every node but these
        ("compute,!gpu[002-064]", "gpu001", 1),
    ],
)
def test_limit_selects_by_role_group_and_hostlist(selector: str, first: str, count: int) -> None:
    names = select_limit(H100, selector)
    assert names[0] == first and len(names) == count
    assert names == sorted(names, key=[n for g in H100.node_groups for n in g.hostnames].index)


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("computer", "'computer' matches no node of the spec; node groups: ctl, db, login, mon, gpu, mig; roles: "),
        ("gpu065", "'gpu065' matches no node of the spec"),
        ("gpu,!compute", "'gpu,!compute' leaves no node"),
        ("gpu[1-", "unbalanced '[' in hostlist 'gpu[1-'"),
    ],
)
def test_limit_naming_no_node_is_a_spec_error(selector: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        select_limit(H100, selector)
    assert info.value.issues[0].path == "--limit" and message in info.value.issues[0].message


def run_cli(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuforge", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "GPUFORGE_STATE_DIR": str(state)},
        cwd=REPO,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("command", ["plan", "apply"])
def test_cli_limit_matching_no_node_exits_2_before_connecting(tmp_path: Path, command: str) -> None:
    data = yaml.safe_load((INVENTORIES / "lab-slurm-minimal.yaml").read_text())
    data["ssh"]["key"] = str(tmp_path / "missing-key")  # preflight would fail too: the limit is checked first
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml_text.dump(data))
    cp = run_cli(command, str(spec), "--limit", "compute2", state=tmp_path / "state")
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "Traceback" not in cp.stderr
    err = " ".join(cp.stderr.split())
    known = "node groups: ctl, workers; roles: compute, controller; nodes: node[1-3]"
    assert f"--limit: 'compute2' matches no node of the spec; {known}" in err
    assert "connecting" not in err


def planned(*steps: Step) -> dict[str, list[PlannedOp]]:
    return {"node1": [PlannedOp("base", list(steps))]}


def test_plan_detailed_exit_code() -> None:
    note = Step(StepKind.NOTE, "no NVIDIA GPU on the PCI bus")  # reports: they change nothing
    upload = Step(StepKind.INSTALL, "install munge", "apt-get install -y munge")
    assert PlanResult(planned(note), {}).exit_code(detailed=True) == 0
    assert PlanResult(planned(note, upload), {}).exit_code(detailed=True) == 2
    assert PlanResult(planned(note, upload), {}).exit_code(detailed=False) == 0
    assert PlanResult(planned(upload), {"node2": "unreachable"}).exit_code(detailed=True) == 1


def test_plan_detailed_exit_code_counts_a_file_upload_alone_as_a_change() -> None:
    """Drift in one file (no package, no command) is a pending change: exit 2 (the review planted a
    mutation that looked at commands only, and nothing failed)."""
    conf = RenderedFile("/etc/slurm/slurm.conf", b"ClusterName=x\n")
    upload = Step(StepKind.UPLOAD, "write /etc/slurm/slurm.conf (14 bytes, 0644 root:root)", upload=conf)
    assert upload.command is None
    assert PlanResult(planned(upload), {}).exit_code(detailed=True) == 2
    assert PlanResult(planned(upload), {}).exit_code(detailed=False) == 0


def test_apply_exit_codes() -> None:
    ok = HostResult("node1", changed=["slurm"])
    assert apply_exit_code(ApplyResult({"node1": ok})) == 0
    assert apply_exit_code(ApplyResult({"node1": ok}, waiting={"node2": "reboot required"})) == 3
    failed = HostResult("node3", error="apt-get failed")
    assert apply_exit_code(ApplyResult({"node1": ok, "node3": failed}, waiting={"node2": "reboot required"})) == 1
