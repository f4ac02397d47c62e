"""Drift on real nodes: hand edits on different lab nodes are found by `validate`, named by node and
file (a diff for files without secrets), a unit file changed without daemon-reload is a pending
restart, a slurmd restarted on an edited slurm.conf is reported from slurmctld's log, and the
health check (what slurmd runs) drains a drifted node with its tagged reason; after
`gpuforge apply` validate passes again and the health check resumes the node (issue: validate
knows when a node no longer matches the spec)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.lab


#: node -> (shell edit, the file it changes, what the check must say about it)
def ctld_log_tail(c: Any) -> str:
    """slurmctld's hash records and (re)starts, and each slurmd's start time: why a check saw a mismatch."""
    return c.ssh(
        "node1",
        "grep -E 'different slurm.conf|Reconfigure|slurmctld version|Running as primary' /var/log/slurm/slurmctld.log"
        " | tail -n 12; scontrol show node -o | grep -o 'NodeName=[^ ]*\\|SlurmdStartTime=[^ ]*'",
        check=False,
    )


EDITS = {
    "node1": [
        ("sed -i 's/^ReturnToService=2/ReturnToService=1/' /etc/slurm/slurm.conf", "/etc/slurm/slurm.conf",
         "content differs"),
        ("chmod 600 /etc/default/slurmd", "/etc/default/slurmd", "mode 0600, want 0644"),
    ],
    "node2": [
        ("sed -i 's/^ConstrainDevices=yes/ConstrainDevices=no/' /etc/slurm/cgroup.conf", "/etc/slurm/cgroup.conf",
         "content differs"),
        ("echo 'ARGS=\"--web.listen-address=:9999\"' >> /etc/default/prometheus-node-exporter",
         "/etc/default/prometheus-node-exporter", "content differs"),
    ],
    "node3": [
        ("sed -i 's/3142/3143/' /etc/apt/apt.conf.d/01gpuforge-proxy", "/etc/apt/apt.conf.d/01gpuforge-proxy",
         "content differs"),
        ("sed -i 's/timeout 55/timeout 5/' /etc/systemd/system/gpuforge-health-metrics.service",
         "/etc/systemd/system/gpuforge-health-metrics.service", "content differs"),
    ],
}  # fmt: skip


def config_results(c: Any) -> dict[str, dict[str, Any]]:
    cp = run_cli("validate", str(c.spec_path), "--checks", "config", "--json", env=c.env)
    doc = json.loads(cp.stdout)
    assert cp.returncode == doc["exit_code"], cp.stderr
    return {n["name"]: {r["id"]: r for r in n["checks"]} for n in doc["nodes"]}


def slurm_reason(c: Any, node: str) -> str:
    out = c.ssh("node1", f"scontrol show node -o {node}")
    return out.split(" Reason=", 1)[1].strip() if " Reason=" in out else ""


def health(c: Any, node: str) -> str:
    """Run the health check on ``node`` as slurmd does (Slurm mode: drain on failure, resume its own)."""
    return c.ssh(node, "/usr/local/sbin/gpuforge-health --slurm; true")


def wait_for_mismatch_record(c: Any, node: str) -> str:
    """slurmctld's log line for ``node``'s registration with another slurm.conf (slurmd just restarted)."""
    cmd = f"grep 'Node {node} appears to have a different slurm.conf' /var/log/slurm/slurmctld.log | tail -n 1; true"
    for _ in range(30):
        line = c.ssh("node1", cmd).strip()
        if line:
            return line
        time.sleep(1)
    raise AssertionError(
        "slurmctld logged no slurm.conf mismatch: " + c.ssh("node1", "tail -n 20 /var/log/slurm/slurmctld.log")
    )


def test_drift_is_named_per_node_and_file_and_apply_repairs_it(lab_cluster: Any) -> None:
    c = lab_cluster
    before = config_results(c)
    assert all(r["config.files"]["status"] == "pass" for r in before.values()), before
    try:
        for node, edits in EDITS.items():
            c.ssh(node, " && ".join(cmd for cmd, _, _ in edits))
        c.ssh("node1", "systemctl restart slurmd")  # slurmd now runs the edited slurm.conf
        print("slurmctld:", wait_for_mismatch_record(c, "node1"))
        print("node2 health:", health(c, "node2"))
        reason = slurm_reason(c, "node2")
        assert reason.startswith("gpuforge: health: config.files_intact: changed by hand: "), reason
        assert "/etc/slurm/cgroup.conf content differs" in reason, reason
        after = config_results(c)
        for node, edits in EDITS.items():
            files = after[node]["config.files"]
            assert files["status"] == "fail", files
            for _, path, says in edits:
                assert f"{path}: {says}" in files["message"], (node, path, files["message"])
        diff = after["node2"]["config.files"]["message"]
        assert "-ConstrainDevices=no" in diff and "+ConstrainDevices=yes" in diff  # the node's line, then the spec's
        assert "-ReturnToService=1" in after["node1"]["config.files"]["message"]
        pending = after["node3"]["config.units_loaded"]
        assert pending["status"] == "fail" and pending["message"].startswith("gpuforge-health-metrics.service: ")
        hashed = after["node1"]["config.slurm_conf_hash"]
        assert hashed["status"] == "fail" and "node1 appears to have a different slurm.conf" in hashed["message"], (
            hashed
        )
        node2_hash = after["node2"]["config.slurm_conf_hash"]
        assert node2_hash["status"] == "pass", (node2_hash["message"], ctld_log_tail(c))
    finally:
        result = c.apply()  # repairs every file (and reloads systemd), whatever the assertions found
        for node in EDITS:  # the health check resumes the nodes it drained (slurmd would, within its interval)
            health(c, node)
    assert result["returncode"] == 0, json.dumps(result, indent=2)
    assert not slurm_reason(c, "node2").startswith("gpuforge: health:"), slurm_reason(c, "node2")
    repaired = config_results(c)
    for node, checks in repaired.items():
        for check in ("config.files", "config.units_loaded", "config.slurm_conf_hash"):
            assert checks[check]["status"] == "pass", (node, checks[check]["message"])
