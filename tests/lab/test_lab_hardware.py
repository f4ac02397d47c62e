"""gpuforge discover on the lab: the nodes' real figures reach NodeName, slurmd -C agrees, no node is INVALID.

Runs on the session cluster (tests/conftest.py: lab_cluster); the spec it applies is the lab spec with
``discover: true`` on every group, and the lab spec as it was is applied again at the end.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from gpuforge.spec import hostlist
from gpuforge.spec.hardware_rules import slurm_real_memory
from tests.conftest import run_cli

pytestmark = pytest.mark.lab

NODES = ("node1", "node2", "node3")


def fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


def discovered(data: dict[str, Any]) -> None:
    for group in data["node_groups"]:
        kept = {k: v for k, v in (group.get("hardware") or {}).items() if k in ("gpu", "nvswitch")}
        group["hardware"] = {**kept, "discover": True}


def slurmd_c(c: Any, node: str) -> dict[str, int]:
    """What slurmd -C reports, with Sockets as slurm.conf counts them (Boards x SocketsPerBoard)."""
    have = fields(c.ssh(node, "slurmd -C").splitlines()[0])
    sockets = int(have.get("Boards", "1")) * int(have["SocketsPerBoard"])
    keys = ("CPUs", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    return {"Sockets": sockets, **{k: int(have[k]) for k in keys}}


def no_node_invalid(c: Any, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while True:
        shown = c.ssh("node1", "scontrol show node")
        if "INVALID" not in shown.upper().replace("INVALID_REG", "INVALID") and "Low RealMemory" not in shown:
            return shown
        assert time.monotonic() < deadline, shown
        time.sleep(3)


def test_discover_then_apply_agrees_with_slurmd(lab_cluster: Any) -> None:
    c = lab_cluster
    spec = c.write("discovered.yaml", mutate=discovered)
    cp = run_cli("discover", str(spec), "--json", env=c.env)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    found = json.loads(cp.stdout)
    assert sorted(found["facts"]) == list(NODES) and not found["errors"], found
    try:
        result = c.apply(spec)
        assert result["returncode"] == 0 and result["ok"], json.dumps(result, indent=2)
        conf = c.ssh("node1", "cat /etc/slurm/slurm.conf")
        lines = {n: fields(line) for line in conf.splitlines() if line.startswith("NodeName=")
                 for n in hostlist.expand(fields(line)["NodeName"])}  # fmt: skip
        assert sorted(lines) == list(NODES), conf
        for node in NODES:
            have, line = slurmd_c(c, node), lines[node]
            assert have["RealMemory"] == found["facts"][node]["memory_mb"], (have, found["facts"][node])
            for key in ("CPUs", "Sockets", "CoresPerSocket", "ThreadsPerCore"):
                assert int(line[key]) == have[key], (node, key, line, have)
            group = [n for n in NODES if lines[n]["NodeName"] == line["NodeName"]]
            smallest = min(found["facts"][n]["memory_mb"] for n in group)
            assert int(line["RealMemory"]) == slurm_real_memory(smallest) < have["RealMemory"]
        no_node_invalid(c)
    finally:
        restored = c.apply()
    # The lab as it was (the tests after this one take it so): converged, no node left drained.
    assert restored["returncode"] == 0 and restored["ok"], json.dumps(restored, indent=2)
    drained = c.ssh("node1", "sinfo -h -R -o '%N %E'")
    assert drained.strip() == "", drained
