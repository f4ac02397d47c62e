"""24 lab nodes converge in one apply (issue: a first apply at 24 nodes used to need three runs).

Its own lab (``gflab-t24``, 10.213.23.0/24) beside the session lab, always torn down. The spec is
``inventories/lab-slurm-minimal.yaml``: munge and slurmctld on node1, slurmd on node2..node24, all
24 nodes installing through the one site mirror at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.lab.pytest_plugin import Lab, own_lab
from gpuforge.lab.spec import write_lab_spec
from tests.conftest import REPO, run_cli

NAME, SUBNET, NODES = "gflab-t24", "10.213.23.0/24", 24
MINIMAL = REPO / "inventories" / "lab-slurm-minimal.yaml"


@pytest.fixture
def lab24() -> Iterator[Lab]:
    with own_lab(NAME, NODES, SUBNET) as lab:
        yield lab


def _sinfo(lab: Lab) -> dict[str, str]:
    """Each Slurm node's state, as slurmctld on node1 sees it."""
    cp = lab.ssh("node1", "sinfo -h -N -o '%N %t'", timeout=120)
    assert cp.returncode == 0, cp.stderr
    return dict(line.split() for line in cp.stdout.splitlines() if line.strip())


@pytest.mark.lab
@pytest.mark.lab_beside  # a lab of its own: beside the session lab's tests
@pytest.mark.slow
def test_24_nodes_converge_in_one_apply(lab24: Lab, tmp_path: Path) -> None:
    spec = write_lab_spec(MINIMAL, lab24.state, tmp_path / "spec.yaml", {"workers": f"node[2-{NODES}]"})
    env = {"GPUFORGE_STATE_DIR": str(tmp_path / "state")}

    first = run_cli("apply", "--yes", str(spec), "--json", env=env)
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

    # apt on the nodes fetched the package lists but no translated descriptions (the base layer's
    # Acquire::Languages "none", written before the packages layer's first update).
    for node in ("node1", f"node{NODES}"):
        lists = lab24.ssh(node, "ls /var/lib/apt/lists", timeout=60).stdout.split()
        assert any(name.endswith("_main_binary-amd64_Packages") for name in lists), (node, lists)
        assert [name for name in lists if "_i18n_Translation-" in name] == [], node

    again = run_cli("apply", "--yes", str(spec), "--json", env=env)
    rerun = json.loads(again.stdout)
    assert again.returncode == 0 and rerun["changes"] == 0, again.stdout
