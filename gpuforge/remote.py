"""Run a command on a node over SSH with the spec's connection settings (host keys checked)."""

from __future__ import annotations

import os
import subprocess
import time

from gpuforge.spec import Spec, resolve_nodes


def ssh_argv(spec: Spec, node_name: str, command: str, timeout: int = 10) -> list[str]:
    node = next(n for n in resolve_nodes(spec) if n.name == node_name)
    argv = ["ssh", "-F", "none", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    argv += ["-o", f"ConnectTimeout={timeout}", "-p", str(spec.ssh.port)]
    if spec.ssh.key:
        argv += ["-i", os.path.expanduser(spec.ssh.key), "-o", "IdentitiesOnly=yes"]
    if spec.ssh.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={os.path.expanduser(spec.ssh.known_hosts)}"]
    sudo = "sudo -n " if spec.ssh.sudo and spec.ssh.user != "root" else ""
    return [*argv, f"{spec.ssh.user}@{node.ssh_target}", sudo + command]


def run(spec: Spec, node_name: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on a node; never raises for a failing command (see returncode)."""
    try:
        return subprocess.run(
            ssh_argv(spec, node_name, command),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, 124, "", f"timed out after {timeout:.0f} s")


def wait_reachable(spec: Spec, node_name: str, up: bool, timeout: float) -> bool:
    """Wait until a node answers SSH (``up``) or stops answering (not ``up``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ok = run(spec, node_name, "true", timeout=15).returncode == 0
        if ok == up:
            return True
        time.sleep(2)
    return False
