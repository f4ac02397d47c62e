"""gpuforge validate and gpuforge-health on real lab nodes with Slurm applied (tests/conftest.py: lab_cluster).

Every test repairs what it breaks, in ``finally``. Tests run in file order on one session cluster.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gpuforge.render.health import HEALTH_CONFIG, HEALTH_PROGRAM
from gpuforge.spec import load_spec
from gpuforge.spec.cluster import Cluster
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS, SKIP
from gpuforge.validator.report import Report
from gpuforge.validator.runner import validate
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.lab

NODES = ["node1", "node2", "node3"]
NO_GPU = "no NVIDIA device on the PCI bus"
NO_FABRIC = "the node's group declares no fabric"


def results(report: Report) -> dict[str, dict[str, Any]]:
    return {n.name: {r.id: r for r in n.checks} for n in report.nodes}


def run_validate(c: Any, spec: Path | None = None, **kw: Any) -> Report:
    path = spec or c.spec_path
    return validate(Cluster.of(load_spec(path), path), **kw)


def node_state(c: Any, name: str) -> tuple[str, str]:
    text = c.ssh("node1", f"scontrol show node {name} -o")
    state = re.search(r"\bState=(\S+)", text)
    reason = re.search(r"\bReason=(.*?)(?=\s(?:Comment|Extra)=|$)", text.strip())
    return (state.group(1) if state else ""), (reason.group(1) if reason else "")


def wait_idle(c: Any, names: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = c.ssh("node1", "sinfo -h -N -o '%n %T'", check=False)
        states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
        if all(states.get(n) in ("idle", "mixed") for n in names):
            return
        time.sleep(1)
    raise AssertionError(f"nodes not idle after {timeout} s: {out}")


def health(c: Any, node: str, args: str = "--slurm") -> subprocess.CompletedProcess[str]:
    cp: subprocess.CompletedProcess[str] = c.lab.ssh(node, f"{HEALTH_PROGRAM} {args}")
    return cp


def test_applied_lab_validates_with_gpu_checks_skipped(lab_cluster: Any, tmp_path: Path) -> None:
    c = lab_cluster
    wait_idle(c, NODES)
    junit, prom = tmp_path / "validate.xml", tmp_path / "validate.prom"
    cp = run_cli("validate", str(c.spec_path), "--json", "--junit", str(junit), "--prom", str(prom), env=c.env)
    doc = json.loads(cp.stdout)
    assert cp.returncode == doc["exit_code"], cp.stderr
    by = {n["name"]: {r["id"]: r for r in n["checks"]} for n in doc["nodes"]}
    assert sorted(by) == NODES
    for name, checks in by.items():
        for cid, r in checks.items():
            if r["layer"] in ("connection", "scheduler", "job", "security"):
                assert r["status"] in (PASS, SKIP), (name, cid, r["message"])
            if cid.startswith("fabric."):  # the lab spec declares no fabric: each check says so
                assert r["status"] == SKIP and r["message"].startswith(NO_FABRIC), (name, cid, r["message"])
            elif cid == "hardware.figures":  # the lab's NodeName line gives Slurm no more than the node has
                assert r["status"] == PASS, (name, cid, r["message"])
            elif r["layer"] in ("hardware", "driver", "toolkit", "container") and cid != "hardware.platform":
                assert r["status"] == SKIP and r["message"].startswith(NO_GPU), (name, cid, r["message"])
        # the lab's nodes run what the spec says (Debian 12 on x86_64), and every managed file is as rendered
        for cid in ("hardware.platform", "config.files", "config.units_loaded"):
            assert checks[cid]["status"] == PASS, (name, cid, checks[cid]["message"])
        for cid in ("connection.ssh", "scheduler.munge", "scheduler.slurmd", "scheduler.node_state",
                    "scheduler.gres", "scheduler.partitions", "job.srun", "security.munge_key",
                    "security.munge_key_identical", "security.ssh_host_keys"):  # fmt: skip
            assert checks[cid]["status"] == PASS, (name, cid, checks[cid]["message"])
    assert by["node1"]["scheduler.slurmctld"]["status"] == PASS
    assert by["node1"]["scheduler.slurmdbd"]["status"] == PASS
    assert by["node1"]["scheduler.accounting"]["status"] == PASS
    assert by["node1"]["security.slurmdbd_conf"]["status"] == PASS
    assert {f["layer"] for f in doc["failures"]} <= {"monitoring"}, doc["failures"]
    assert junit.read_text().count("<testcase ") == doc["summary"]["checks"]
    assert "gpuforge_check_status" in prom.read_text()
    print(f"\nvalidate on the lab: {doc['summary']}, {doc['duration_s']} s; failures: {doc['failures']}")


def test_health_program_is_installed_by_apply(lab_cluster: Any) -> None:
    c = lab_cluster
    for name in NODES:
        out = c.ssh(name, f"stat -c '%a %U' {HEALTH_PROGRAM} {HEALTH_CONFIG}; head -1 {HEALTH_PROGRAM}")
        lines = out.splitlines()
        assert lines[:2] == ["755 root", "600 root"], out  # health.json: root's alone (docs/security.md)
        assert lines[2] == "#!/usr/bin/env python3"
        cfg = json.loads(c.ssh(name, f"cat {HEALTH_CONFIG}"))
        assert cfg["node"] == name and cfg["slurm"]["compute"]
    assert "HealthCheckProgram=/usr/local/sbin/gpuforge-health" in c.ssh(
        "node2", "grep HealthCheck /etc/slurm/slurm.conf"
    )
    cp = health(lab_cluster, "node2", "--no-slurm")
    assert cp.returncode == 0, cp.stdout + cp.stderr


def test_munge_stopped_on_node2_fails_there(lab_cluster: Any) -> None:
    c = lab_cluster
    c.ssh("node2", "systemctl stop munge")
    try:
        report = run_validate(c, checks="scheduler,job")
        r = results(report)
        assert report.exit_code == 1
        assert r["node2"]["scheduler.munge"].status == FAIL
        assert r["node2"]["scheduler.munge"].message == "munge.service is inactive (dead)"
        assert r["node2"]["scheduler.slurmd"].status == BLOCKED
        assert r["node2"]["job.srun"].status == BLOCKED
        for name in ("node1", "node3"):
            assert r[name]["scheduler.munge"].status == PASS
            assert r[name]["job.srun"].status == PASS, r[name]["job.srun"].message
        assert {n for n, f in report.failures()} == {"node2"}
    finally:
        c.ssh("node2", "systemctl start munge")
    wait_idle(c, NODES)


def test_wrong_driver_pin_fails_honestly_without_a_driver(lab_cluster: Any) -> None:
    c = lab_cluster

    def gpu_workers(d: dict) -> None:
        d["versions"]["driver"]["version"] = "535.54.03"
        d["node_groups"][1]["hardware"] = {**d["node_groups"][1]["hardware"], "gpu": {"model": "H100-80GB", "count": 1}}

    spec = c.write("driver-pin.yaml", mutate=gpu_workers)
    r = results(run_validate(c, spec, checks="hardware,driver"))
    for name in ("node2", "node3"):
        assert r[name]["hardware.gpu_count"].status == FAIL
        assert r[name]["hardware.gpu_count"].message.startswith(
            "the spec declares 1 x H100-80GB GPUs, but no NVIDIA GPU is on the PCI bus"
        )
        assert r[name]["driver.module"].status == FAIL
        assert r[name]["driver.module"].message.startswith("nvidia kernel module not loaded")
        assert "no NVIDIA GPU on the PCI bus" in r[name]["driver.module"].message
        assert r[name]["driver.version"].status == BLOCKED
        assert "535.54.03" not in r[name]["driver.version"].message
    assert r["node1"]["driver.version"].status == SKIP


def test_pyxis_enabled_but_not_loaded_fails(lab_cluster: Any) -> None:
    """The applied lab has no pyxis line in plugstack.conf.d: a spec asking for pyxis must fail job.pyxis."""
    c = lab_cluster

    def pyxis(d: dict) -> None:
        d["slurm"]["containers"]["pyxis"] = True

    lines = c.ssh("node2", "cat /etc/slurm/plugstack.conf.d/*.conf 2>/dev/null | grep -c spank_pyxis || true")
    assert lines.strip() in ("", "0")
    r = results(run_validate(c, c.write("pyxis.yaml", mutate=pyxis), checks="job.pyxis"))
    for name in NODES:
        assert r[name]["job.pyxis"].status == FAIL
        assert r[name]["job.pyxis"].message.startswith("srun --help does not list --container-image: pyxis not loaded")
    r = results(run_validate(c, checks="job.pyxis"))
    assert r["node2"]["job.pyxis"].status == SKIP


def test_munge_key_0644_fails_and_health_drains_then_resumes(lab_cluster: Any) -> None:
    c = lab_cluster
    c.ssh("node3", "chmod 0644 /etc/munge/munge.key")
    try:
        r = results(run_validate(c, checks="security"))
        assert r["node3"]["security.munge_key"].status == FAIL
        assert r["node3"]["security.munge_key"].message == (
            "/etc/munge/munge.key is 0644 munge:munge, want 0400 munge:munge"
        )
        assert r["node3"]["security.munge_key_identical"].status == BLOCKED
        assert r["node2"]["security.munge_key"].status == PASS

        cp = health(c, "node3")
        assert cp.returncode == 1, cp.stdout + cp.stderr
        state, reason = node_state(c, "node3")
        assert "DRAIN" in state
        # the reason names every failing critical check: the drift check and the key check both see the mode
        assert reason.startswith("gpuforge: health: "), reason
        assert "security.munge_key: /etc/munge/munge.key is 0644" in reason, reason
        cp = health(c, "node3")  # the same failure again: left as it is
        assert "already drained for the same reason" in cp.stdout
    finally:
        c.ssh("node3", "chmod 0400 /etc/munge/munge.key")
    cp = health(c, "node3")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "resumed node3" in cp.stdout
    state, _ = node_state(c, "node3")
    assert "DRAIN" not in state
    wait_idle(c, NODES)


def test_slurmd_runs_it_as_health_check_program(lab_cluster: Any) -> None:
    """slurmd starts gpuforge-health without arguments; it drains on its own (parent is slurmd)."""
    c = lab_cluster
    c.ssh("node3", "chmod 0644 /etc/munge/munge.key")
    try:
        c.ssh("node3", "systemctl restart slurmd")  # slurmd runs the HealthCheckProgram when it starts
        deadline = time.monotonic() + 90
        state, reason = node_state(c, "node3")
        while not reason.startswith("gpuforge: health:") and time.monotonic() < deadline:
            time.sleep(2)
            state, reason = node_state(c, "node3")
        assert "DRAIN" in state and reason.startswith("gpuforge: health: "), (state, reason)
        assert "security.munge_key" in reason, (state, reason)
    finally:
        c.ssh("node3", "chmod 0400 /etc/munge/munge.key")
        health(c, "node3")  # resumes our own drain
    wait_idle(c, NODES)


def test_node_drained_by_hand_stays_drained(lab_cluster: Any) -> None:
    c = lab_cluster
    c.ssh("node1", "scontrol update NodeName=node2 State=DRAIN Reason='disk swap ticket 42'")
    try:
        cp = health(c, "node2")
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert "drained for another reason" in cp.stdout
        state, reason = node_state(c, "node2")
        assert "DRAIN" in state and reason.startswith("disk swap ticket 42")
        r = results(run_validate(c, checks="scheduler.node_state,job.srun"))
        assert r["node2"]["scheduler.node_state"].status == FAIL
        assert "disk swap ticket 42" in r["node2"]["scheduler.node_state"].message
        assert r["node2"]["job.srun"].status == BLOCKED
    finally:
        c.ssh("node1", "scontrol update NodeName=node2 State=RESUME")
    wait_idle(c, NODES)


def test_wrong_host_key_and_unreachable_node_are_failures_of_that_node(lab_cluster: Any, tmp_path: Path) -> None:
    c = lab_cluster
    lines = Path(c.lab.state.known_hosts).read_text().splitlines()
    node1_key = next(
        line for line in lines if line.split()[0].split(",")[0] in ("node1", c.lab.state.node("node1").address)
    )
    addr2 = c.lab.state.node("node2").address
    forged = [line for line in lines if "node2" not in line.split()[0] and addr2 not in line.split()[0].split(",")]
    forged.append(f"node2,{addr2} " + " ".join(node1_key.split()[1:]))
    kh = tmp_path / "known_hosts"
    kh.write_text("\n".join(forged) + "\n")

    def use_kh(d: dict) -> None:
        d["ssh"]["known_hosts"] = str(kh)

    r = results(run_validate(c, c.write("forged-kh.yaml", mutate=use_kh), checks="connection,security.munge_key"))
    assert r["node2"]["connection.ssh"].status == FAIL
    assert r["node2"]["connection.ssh"].message.startswith("node2 unreachable: host key verification failed")
    assert r["node2"]["security.munge_key"].status == BLOCKED
    assert r["node1"]["connection.ssh"].status == PASS and r["node3"]["connection.ssh"].status == PASS

    netns = f"gf-{c.lab.name}-node3"
    link = ["ip", "netns", "exec", netns, "ip", "link", "set", "eth0"]
    subprocess.run([*link, "down"], check=True)
    try:
        t0 = time.monotonic()
        report = run_validate(c, checks="connection,scheduler.munge")
        took = time.monotonic() - t0
        r = results(report)
        assert report.exit_code == 1
        assert (
            r["node3"]["connection.ssh"].status == FAIL and "node3 unreachable" in r["node3"]["connection.ssh"].message
        )
        assert r["node3"]["scheduler.munge"].status == BLOCKED
        assert r["node2"]["scheduler.munge"].status == PASS
        print(f"\nvalidate with node3 unreachable: {took:.1f} s")
    finally:
        subprocess.run([*link, "up"], check=False)
    wait_idle(c, NODES, timeout=120)


def test_bench_figures(lab_cluster: Any) -> None:
    """bench/validate.py on this lab: figures printed, no assertion on timings."""
    spec = importlib.util.spec_from_file_location("bench_validate", REPO / "bench" / "validate.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    figures = bench.run(lab_cluster.spec_path, "node2", runs=3)
    print(json.dumps(figures, indent=2))
    assert figures["validate"]["nodes"] == 3
