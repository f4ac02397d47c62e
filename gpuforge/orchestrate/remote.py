"""Run a command on a node over SSH with the spec's connection settings (host keys checked)."""

from __future__ import annotations

import shlex
import subprocess
import time

from gpuforge.spec import resolve_nodes
from gpuforge.spec.bounded_read import NodeOutputError, run_bounded
from gpuforge.spec.cluster import Cluster


def ssh_argv(cluster: Cluster, node_name: str, command: str, options: tuple[str, ...] = ()) -> list[str]:
    """ssh argv for ``command`` on a node: the validator's transport (host keys checked, vagrant
    aware), with ``options`` (more ``-o`` settings) before the destination."""
    from gpuforge.validator.runner import SshTransport

    spec = cluster.spec
    node = next(n for n in resolve_nodes(spec) if n.name == node_name)
    if spec.ssh.sudo and spec.ssh.user != "root":
        # The whole command line runs privileged, not only its first word ("a; b" or "a && b").
        command = f"sudo -n sh -c {shlex.quote(command)}"
    ssh, *rest = SshTransport(cluster).argv(node)
    return [ssh, *options, *rest, command]


def run(cluster: Cluster, node_name: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on a node; never raises for a failing command (see returncode). At most
    ``NODE_OUTPUT_BYTES`` of each stream is read: more is an error (exit 1), never held whole."""
    argv = ssh_argv(cluster, node_name, command)
    try:
        done = run_bounded(argv, b"", timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, 124, "", f"timed out after {timeout:.0f} s")
    except NodeOutputError as e:
        return subprocess.CompletedProcess(argv, 1, "", f"{node_name}: {e}")
    out, err = (b.decode("utf-8", "replace") for b in (done.stdout, done.stderr))
    return subprocess.CompletedProcess(argv, done.returncode, out, err)


def wait_reachable(cluster: Cluster, node_name: str, up: bool, timeout: float) -> bool:
    """Wait until a node answers SSH (``up``) or stops answering (not ``up``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ok = run(cluster, node_name, "true", timeout=15).returncode == 0
        if ok == up:
            return True
        time.sleep(2)
    return False
