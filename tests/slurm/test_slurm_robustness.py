"""More Slurm on real lab nodes: an unreachable node, the plain pyinfra CLI, a real slurmctld
accepting the rendered configuration of the 64-node example."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuforge.render import render_node
from gpuforge.spec import load_spec, resolve_nodes
from tests.conftest import REPO

pytestmark = pytest.mark.lab


def test_one_unreachable_node_does_not_stop_the_others(lab_cluster: Any) -> None:
    c = lab_cluster
    netns = f"gf-{c.lab.name}-node3"
    link = ["ip", "netns", "exec", netns, "ip", "link", "set", "eth0"]
    subprocess.run([*link, "down"], check=True)  # node3's network fails

    def longer(d: dict) -> None:
        d["slurm"]["partitions"][0]["max_time"] = "3:00:00"

    spec = c.write("while-down.yaml", mutate=longer)
    try:
        result = c.apply(spec)
        assert result["returncode"] == 1, result
        hosts = result["hosts"]
        assert not hosts["node3"]["ok"] and "unreachable" in hosts["node3"]["error"]
        assert hosts["node1"]["ok"] and hosts["node2"]["ok"], hosts
        assert "MaxTime=03:00:00" in c.ssh("node1", "scontrol show partition batch")
        subprocess.run([*link, "up"], check=True)  # node3 is back
        result = c.apply(spec)  # the re-run finishes node3
        assert result["returncode"] == 0 and result["ok"], result
        assert "3:00:00" in c.ssh("node3", "grep '^PartitionName=batch' /etc/slurm/slurm.conf")
    finally:
        subprocess.run([*link, "up"], check=False)
        assert c.apply()["returncode"] == 0


def test_plain_pyinfra_cli_runs_the_deploys(lab_cluster: Any) -> None:
    c = lab_cluster
    env = {**os.environ, **c.env, "GPUFORGE_SPEC": str(c.spec_path)}
    pyinfra = str(Path(sys.executable).parent / "pyinfra")  # the CLI installed with gpuforge's dependencies
    cp = subprocess.run(
        [pyinfra, "-y", "inventories/from_spec.py", "deploys/site.py"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    out = cp.stdout + cp.stderr
    assert cp.returncode == 0, out
    for node in ("node1", "node2", "node3"):
        assert node in out
    # Already converged by gpuforge: pyinfra finds nothing to change either.
    assert "No changes" in out or "Changed: 0" in out or "changed: 0" in out.lower(), out


def test_real_slurmctld_accepts_the_rendered_64_node_config(lab_cluster: Any) -> None:
    """slurmctld parses the slurm-h100 example (configless, topology, GRES, MIG GRES) and runs."""
    c = lab_cluster
    spec = load_spec(REPO / "inventories" / "slurm-h100.yaml")
    ctl = next(n for n in resolve_nodes(spec) if n.name == "ctl01")
    files = {Path(f.path).name: f.content for f in render_node(spec, ctl) if f.path.startswith("/etc/slurm/")}
    assert {"slurm.conf", "gres.conf", "cgroup.conf", "topology.conf"} <= set(files)
    d = "/tmp/h100conf"
    conf = str(files["slurm.conf"])
    for old, new in (
        ("/var/lib/slurm/slurmctld", f"{d}/state"),
        ("/var/log/slurm/slurmctld.log", f"{d}/slurmctld.log"),
        ("/run/slurmctld.pid", f"{d}/slurmctld.pid"),
        ("SlurmctldPort=6817", "SlurmctldPort=16817"),
        ("SlurmdPort=6818", "SlurmdPort=16818"),
        # Nothing listens there: the check must not talk to the lab's own slurmdbd.
        ("AccountingStoragePort=6819", "AccountingStoragePort=16819"),
    ):
        conf = conf.replace(old, new)
    # slurmctld will not start with slurmdbd accounting while no slurmdbd answers (a runtime
    # dependency, not a config error): the check runs with accounting storage off.
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
    conf = "\n".join(ln for ln in conf.splitlines() if not ln.startswith("AccountingStorage")) + "\n"
    conf += "AccountingStorageType=accounting_storage/none\n"
    files["slurm.conf"] = conf
    setup = [f"rm -rf {d} && mkdir -p {d}/state && chown slurm:slurm {d}/state"]
    for name, content in files.items():
        setup.append(f"printf %s {shlex.quote(str(content))} > {d}/{name}")
    # Every name resolves to loopback, where nothing listens on the check's ports.
    names = " ".join(n.name for n in resolve_nodes(spec))
    setup.append(f"printf '127.0.0.1 localhost {names}\\n' > {d}/hosts")
    c.ssh("node1", " && ".join(setup))
    # A private hostname and /etc/hosts so that this node may act as ctl01 for the check.
    run = (
        f"unshare --uts --mount sh -c 'mount --bind {d}/hosts /etc/hosts && hostname ctl01 && "
        f"timeout -k 5 10 slurmctld -D -f {d}/slurm.conf'; echo rc=$?"
    )
    out = c.ssh("node1", run, check=False)
    log = c.ssh("node1", f"cat {d}/slurmctld.log", check=False)
    assert "rc=124" in out or "rc=137" in out, f"slurmctld exited early:\n{out}\n{log}"  # ran until stopped
    assert "fatal" not in log.lower(), log
    assert "Recovered state of 0 nodes" in log or "slurmctld version" in log, log
    assert "NodeName=gpu[001-060]" in conf and "NodeName=gpu[061-064]" in conf


def test_configless_mode_compute_nodes_fetch_their_config(lab_cluster: Any) -> None:
    """Configless: slurmd gets slurm.conf from slurmctld (Debian's unit needs our drop-in)."""
    c = lab_cluster

    def configless(d: dict) -> None:
        d["slurm"]["config_mode"] = "configless"

    spec = c.write("configless.yaml", mutate=configless)
    try:
        result = c.apply(spec)
        assert result["returncode"] == 0, result
        assert "--conf-server node1" in c.ssh("node2", "cat /etc/default/slurmd")
        dropin = "/etc/systemd/system/slurmd.service.d/gpuforge-configless.conf"
        assert "ConditionPathExists=" in c.ssh("node2", f"cat {dropin}")
        # slurmd runs on a config it fetched from the controller, cached under /run/slurm/conf.
        assert c.ssh("node2", "systemctl is-active slurmd").strip() == "active"
        assert "ClusterName=gflab" in c.ssh("node2", "cat /run/slurm/conf/slurm.conf")
        assert "SlurmctldParameters=enable_configless" in c.ssh("node1", "cat /etc/slurm/slurm.conf")
        assert sorted(c.ssh("node1", "srun -N3 hostname").split()) == ["node1", "node2", "node3"]
        assert c.apply(spec)["changes"] == 0  # and it stays converged
    finally:
        assert c.apply()["returncode"] == 0


def test_rolling_change_drains_validates_and_resumes_node_by_node(lab_cluster: Any) -> None:
    """A hardware change (rolling): each worker is drained, converged, validated, resumed."""
    c = lab_cluster
    assert c.apply()["returncode"] == 0  # the baseline is what was applied last

    def less_memory(d: dict) -> None:
        d["node_groups"][1]["hardware"] = {**d["node_groups"][1]["hardware"], "real_memory_mb": 900}

    c.write("spec.yaml", mutate=less_memory)  # the same spec file, edited
    try:
        result = c.apply()
        assert result["returncode"] == 0 and result["ok"], result
        for node in ("node2", "node3"):
            assert "RealMemory=900" in c.ssh("node1", f"scontrol show node {node}")
            events = c.ssh("node1", f"sacctmgr -nP show event nodes={node} format=NodeName,Reason")
            assert "gpuforge: rolling change" in events, events
        states = c.ssh("node1", "sinfo -h -N -o '%n %T'")
        assert all(line.split()[1] == "idle" for line in states.splitlines()), states  # all resumed
    finally:
        c.write("spec.yaml")
        assert c.apply()["returncode"] == 0


def test_a_rolling_change_keeps_an_operators_drain_and_waits_for_a_running_job(lab_cluster: Any) -> None:
    """Issue 29's lab case on real Slurm: node3 drained by hand ("bad gpu"), a job running on node2
    when the apply starts, then a rolling change of both workers. node3 keeps its drain and its
    reason and is not changed; node2's job completes before node2's slurm.conf changes."""
    c = lab_cluster
    assert c.apply()["returncode"] == 0  # the baseline is what was applied last
    c.ssh("node1", "scontrol update NodeName=node3 State=DRAIN Reason='bad gpu'")
    submit = "sbatch --parsable --chdir=/tmp -A research --qos=normal -p batch -w node2 -o /dev/null --wrap 'sleep 12'"
    job = c.ssh("node1", f'su alice -c "{submit}"').strip().split(";")[0]
    running = f"squeue -h -j {job} -o %T | grep -q RUNNING"
    c.ssh("node1", f"for i in $(seq 60); do {running} && exit 0; sleep 0.5; done; exit 1")

    def less_memory(d: dict) -> None:
        d["node_groups"][1]["hardware"] = {**d["node_groups"][1]["hardware"], "real_memory_mb": 900}

    c.write("spec.yaml", mutate=less_memory)
    try:
        result = c.apply()
        assert result["returncode"] == 3, result  # converged but for node3, which waits for its operator
        assert "drained by an operator (bad gpu)" in result["waiting"]["node3"], result
        assert "node3" not in result["hosts"]
        state, reason = c.ssh("node1", "sinfo -h -N -n node3 -o '%T|%E'").strip().split("|")
        assert state.startswith("drain") and reason == "bad gpu", (state, reason)
        node3_conf = "grep -q RealMemory=900 /etc/slurm/slurm.conf && echo changed || echo unchanged"
        assert c.ssh("node3", node3_conf).strip() == "unchanged"  # not changed at all
        ended = c.ssh("node1", f"sacct -n -X -P -j {job} -o State,End").strip().splitlines()[0]
        job_state, end = ended.split("|")
        assert job_state == "COMPLETED", ended  # not cancelled, requeued or killed by the change
        end_s = int(c.ssh("node1", f"date -d '{end}' +%s").strip())
        changed_s = int(c.ssh("node2", "stat -c %Y /etc/slurm/slurm.conf").strip())
        assert end_s <= changed_s, (end, changed_s)  # node2 changed only after its job ended
        assert "RealMemory=900" in c.ssh("node1", "scontrol show node node2")
        assert c.ssh("node1", "sinfo -h -N -n node2 -o %T").strip() == "idle"  # given back
    finally:
        c.ssh("node1", "scontrol update NodeName=node3 State=RESUME", check=False)  # the operator's call
        c.write("spec.yaml")
        assert c.apply()["returncode"] == 0
