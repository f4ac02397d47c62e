"""24 lab nodes converge in one apply (issue: a first apply at 24 nodes used to need three runs).

Its own lab (``gflab-t24``, 10.213.21.0/24) beside the session lab, always torn down. The spec is
``inventories/lab-slurm-minimal.yaml``: munge and slurmctld on node1, slurmd on node2..node24, all
24 nodes installing through the one site mirror at once.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.lab import core
from gpuforge.lab.spec import lab_spec_data
from tests.conftest import REPO, run_cli

NAME, SUBNET, NODES = "gflab-t24", "10.213.21.0/24", 24
MINIMAL = REPO / "inventories" / "lab-slurm-minimal.yaml"


@pytest.fixture
def lab24() -> Iterator[Any]:
    core.down(NAME, log=lambda m: None)
    try:
        yield core.up(NAME, NODES, SUBNET, log=print)
    finally:
        core.down(NAME, log=lambda m: None)


def run_ssh(state: Any, node: str, cmd: str) -> str:
    cp = subprocess.run(
        core.ssh_command(state, node, [cmd]), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert cp.returncode == 0, f"{node}: {cmd}: rc={cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    return cp.stdout


def _sinfo(state: Any) -> dict[str, str]:
    """Each Slurm node's state, as slurmctld on node1 sees it."""
    out = run_ssh(state, "node1", "sinfo -h -N -o '%N %t'")
    return dict(line.split() for line in out.splitlines() if line.strip())


@pytest.mark.lab
@pytest.mark.slow
def test_24_nodes_converge_in_one_apply(lab24: Any, tmp_path: Path) -> None:
    data = lab_spec_data(yaml.safe_load(MINIMAL.read_text()), lab24, {"workers": f"node[2-{NODES}]"})
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {"GPUFORGE_STATE_DIR": str(tmp_path / "state")}

    first = run_cli("apply", str(spec), "--json", env=env)
    assert first.stdout.strip(), first.stderr
    result = json.loads(first.stdout)
    failed = {h: r["error"] for h, r in result["hosts"].items() if not r["ok"]}
    assert failed == {} and first.returncode == 0, f"{json.dumps(failed, indent=1)}\n{first.stderr[-4000:]}"
    assert sorted(result["hosts"], key=lambda n: int(n[4:])) == [f"node{i}" for i in range(1, NODES + 1)]
    assert all(r["changed"] for r in result["hosts"].values())  # every node was fresh

    # Slurm has every worker: slurmd registered on all 23 of them.
    want = {f"node{i}": "idle" for i in range(2, NODES + 1)}
    deadline = time.monotonic() + 90
    while (states := _sinfo(lab24)) != want and time.monotonic() < deadline:
        time.sleep(2)
    assert states == want

    again = run_cli("apply", str(spec), "--json", env=env)
    rerun = json.loads(again.stdout)
    assert again.returncode == 0 and rerun["changes"] == 0, again.stdout
