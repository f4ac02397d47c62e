"""Acceptance campaigns on the lab's three real nodes, through the lab's real Slurm (tests/conftest.py:
the session ``lab_cluster``).

1. stress-ng and fio come from the lab's package mirror (the lab image has neither; gpuforge does
   not install acceptance tools yet: docs/acceptance.md).
2. Campaign A, partition batch = node1..3: once node3's burn-in starts, its container runs under a
   2% CPU quota (a cgroup v1 cpu group on this host holding its processes; at 10% a loaded host gave
   every node about as little) and node3 must be the outlier of a CPU-bound burn-in (cpu or memory)
   with its figure below the median; node2's node-exporter is stopped, its health step fails and it is
   drained with the step's reason; node1 passes. The container step is skipped (pyxis is off in
   the lab spec) and says so.
3. Campaign B, batch = node1..2 and spare = node3 (set live with scontrol, as an apply of that
   spec would), spares {batch: node3, size 2}: node2 stays drained (untested, left alone), node3
   passes and moves into batch; the swap is recorded.
4. The HTML report in the distro's headless Chromium (gpuforge.acceptance.browser): skipped only where
   no Chromium is installed (scripts/setup.sh installs it; under CI a missing one fails).

Everything is put back afterwards: the quota, node-exporter, the partitions, node2's drain.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuforge.acceptance import browser
from tests.acceptance.test_report_browser import need_browser
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.lab

NODES = ("node1", "node2", "node3")
CGROUP = Path("/sys/fs/cgroup/cpu/gpuforge-accept-lab-slow")


def steps(fio: bool) -> dict[str, Any]:
    return {
        "cpu": {"seconds": 20, "workers": 1},
        "memory": {"seconds": 15, "percent": 3},
        "disk": {"enabled": fio, "size": "64M", "seconds": 10},
    }


def descendants(root: int) -> list[int]:
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = [root], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        todo += kids
    return found


def slow_down(lab: Any, node: str, percent: int) -> None:
    """All of ``node``'s container processes into a cpu cgroup with ``percent``% of one CPU."""
    CGROUP.mkdir(exist_ok=True)
    (CGROUP / "cpu.cfs_period_us").write_text("100000")
    (CGROUP / "cpu.cfs_quota_us").write_text(str(percent * 1000))
    for pid in descendants(lab.pids()[node]):
        with contextlib.suppress(OSError):  # gone meanwhile
            (CGROUP / "cgroup.procs").write_text(str(pid))


def undo_slow_down() -> None:
    if not CGROUP.exists():
        return
    for pid in (CGROUP / "cgroup.procs").read_text().split():
        with contextlib.suppress(OSError):
            Path("/sys/fs/cgroup/cpu/cgroup.procs").write_text(pid)
    CGROUP.rmdir()


def sinfo(c: Any) -> dict[str, tuple[str, str, str]]:
    out = c.ssh("node1", "sinfo -h -N -o '%N|%T|%P|%E'")
    return {n: (s, p, r) for n, s, p, r in (line.split("|", 3) for line in out.splitlines())}


@pytest.fixture(scope="module")
def tools(lab_cluster: Any) -> Iterator[bool]:
    """stress-ng on every node (required) and fio (if the mirror serves it); True when fio is there."""
    for node in NODES:
        cmd = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends stress-ng fio"
        if lab_cluster.lab.ssh(node, cmd).returncode != 0:
            lab_cluster.ssh(node, "apt-get update -q && " + cmd.replace(" fio", ""), check=True)
    fio = all(lab_cluster.lab.ssh(n, "command -v fio").returncode == 0 for n in NODES)
    yield fio
    undo_slow_down()
    for node in NODES:
        lab_cluster.ssh(node, "systemctl start prometheus-node-exporter", check=False)
    lab_cluster.ssh("node1", "scontrol delete PartitionName=spare; scontrol update PartitionName=batch "
                    "Nodes=node[1-3]; scontrol update NodeName=node[1-3] State=RESUME", check=False)  # fmt: skip


def accept(c: Any, spec: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    cp = run_cli("accept", str(spec), "--json", "--poll", "2", *extra, env=c.env, timeout=1800)
    c.outputs.append(cp.stdout + cp.stderr)
    assert cp.stdout.strip(), cp.stderr
    return cp.returncode, json.loads(cp.stdout), cp.stderr


def burn_in_running(lab: Any, node: str) -> bool:
    """A stress-ng process runs in ``node``'s container (its job has passed the health step)."""
    for pid in descendants(lab.pids()[node]):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "stress-ng":
                return True
    return False


def accept_slowing(c: Any, spec: Path, node: str, percent: int) -> tuple[int, dict[str, Any], str, bool]:
    """``gpuforge accept`` with ``node`` put under a CPU quota once its burn-in starts (not earlier: at
    1% from the start its health program ran out of time and failed, on the lab, run 2)."""
    proc = subprocess.Popen([sys.executable, "-m", "gpuforge", "accept", str(spec), "--json", "--poll", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env={**os.environ, **c.env}, cwd=REPO)  # fmt: skip
    slowed, deadline = False, time.monotonic() + 1800
    while proc.poll() is None and time.monotonic() < deadline:
        if not slowed and burn_in_running(c.lab, node):
            slow_down(c.lab, node, percent)
            slowed = True
        time.sleep(0.3)
    out, err = proc.communicate(timeout=60)
    c.outputs.append(out + err)
    assert out.strip(), err
    return proc.returncode, json.loads(out), err, slowed


@pytest.fixture(scope="module")
def campaign_a(lab_cluster: Any, tools: bool) -> dict[str, Any]:
    c = lab_cluster
    spec = c.write("accept-a.yaml", mutate=lambda d: d.update(acceptance={"steps": steps(tools)}))
    c.ssh("node2", "systemctl stop prometheus-node-exporter")
    try:
        rc, doc, err, slowed = accept_slowing(c, spec, "node3", 2)
    finally:
        undo_slow_down()
        c.ssh("node2", "systemctl start prometheus-node-exporter", check=False)
    assert slowed, "node3's burn-in was never seen running"
    doc["returncode"], doc["stderr"] = rc, err
    print(json.dumps({n["node"]: [n["status"], n["outliers"]] for n in doc["nodes"]}, indent=1))
    return doc


def test_slow_node_is_the_outlier_with_its_figure_against_the_median(campaign_a: dict[str, Any]) -> None:
    nodes = {n["node"]: n for n in campaign_a["nodes"]}
    burn_in = [o for o in nodes["node3"]["outliers"] if o["step"] in ("cpu", "memory")]
    assert burn_in, json.dumps(campaign_a["stats"])
    for o in burn_in:
        assert o["value"] < o["median"] and o["below_percent"] > 10
        others = [s["metrics"][o["metric"]] for n in ("node1", "node2") for s in nodes[n]["steps"]
                  if s["step"] == o["step"]]  # fmt: skip
        assert o["value"] < min(others)
    assert nodes["node3"]["status"] == "outlier" and nodes["node1"]["status"] == "pass"
    assert {g["name"]: g["nodes"] for g in campaign_a["groups"]} == {"batch": list(NODES)}, "one job per partition"


def test_failed_node_is_drained_with_the_reason(lab_cluster: Any, campaign_a: dict[str, Any]) -> None:
    node2 = next(n for n in campaign_a["nodes"] if n["node"] == "node2")
    health = next(s for s in node2["steps"] if s["step"] == "health")
    assert node2["status"] == "fail" and "monitoring.node_exporter" in health["message"]
    state, _, reason = sinfo(lab_cluster)["node2"]
    assert "drain" in state and reason.startswith("gpuforge: accept: health: monitoring.node_exporter"), reason
    assert campaign_a["returncode"] == 1


def test_every_step_ran_for_real(campaign_a: dict[str, Any], tools: bool) -> None:
    node1 = {s["step"]: s for s in next(n for n in campaign_a["nodes"] if n["node"] == "node1")["steps"]}
    assert node1["cpu"]["status"] == "pass" and node1["memory"]["status"] == "pass"
    assert node1["container"] == {**node1["container"], "status": "skip",
                                  "message": "slurm.containers.pyxis is off in the spec"}  # fmt: skip
    if tools:
        assert node1["disk"]["status"] == "pass" and node1["disk"]["metrics"]["read_iops"] > 0
    else:
        assert "disk" not in node1, "fio is not served by the lab mirror: the disk step was off"


@pytest.fixture(scope="module")
def campaign_b(lab_cluster: Any, tools: bool, campaign_a: dict[str, Any]) -> dict[str, Any]:
    c = lab_cluster

    def spares(d: dict[str, Any]) -> None:
        d["slurm"]["partitions"] = [{"name": "batch", "nodes": "node[1-2]", "default": True, "max_time": "1:00:00"},
                                    {"name": "spare", "nodes": "node3", "max_time": "1:00:00"}]  # fmt: skip
        d["acceptance"] = {"steps": steps(tools), "spares": [{"partition": "batch", "nodes": "node3", "size": 2}]}

    spec = c.write("accept-b.yaml", mutate=spares)
    c.ssh("node1", "scontrol update PartitionName=batch Nodes=node[1-2] && "
                   "scontrol create PartitionName=spare Nodes=node3 MaxTime=60")  # fmt: skip
    rc, doc, err = accept(c, spec)
    doc["returncode"], doc["stderr"] = rc, err
    return doc


def test_spare_moves_into_the_short_partition(lab_cluster: Any, campaign_b: dict[str, Any]) -> None:
    nodes = {n["node"]: n for n in campaign_b["nodes"]}
    assert nodes["node2"]["status"] == "untested" and "gpuforge: accept: health" in nodes["node2"]["untested"]
    assert nodes["node3"]["status"] == "pass", nodes["node3"]
    moved = [a for a in campaign_b["actions"] if a["action"] == "spare-in"]
    assert moved == [{"action": "spare-in", "partition": "batch", "spare": "node3", "replaces": "node2",
                      "reason": moved[0]["reason"], "result": "moved"}]  # fmt: skip
    parts = lab_cluster.ssh("node1", "sinfo -h -N -n node3 -o '%P'").split()
    assert "batch" in [p.rstrip("*") for p in parts], parts
    record = json.loads((lab_cluster.state_dir / "gflab" / "acceptance" / "spares.json").read_text())
    assert record["moved_in"] == {"batch": ["node3"]}


def test_report_opens_in_headless_chromium(campaign_a: dict[str, Any]) -> None:
    """The campaign's own report.html in the distro's Chromium (scripts/setup.sh installs it): the heat
    map and every chart laid out, node2 named as failed and node3 as the outlier with a flagged bar."""
    binary = need_browser()
    page = Path(campaign_a["saved"]).with_name("report.html")
    v = browser.view(page, binary)
    assert browser.problems(v, failed=["node2"], outliers=["node3"]) == [], v.layout
    assert "node2: health fail: monitoring.node_exporter" in v.layout["failed"]["text"]
    assert "node3: outlier: " in v.layout["outliers"]["text"]
