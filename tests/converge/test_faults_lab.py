"""Faults during an apply, for real on the lab (issue 14, item 13).

- A node whose host key changed is refused (named, with the cause); nothing on it changes, the
  other nodes converge; with the right key the next apply finishes it.
- An apply stopped by SIGTERM or SIGINT part-way: no traceback, no file half-written at its
  real path (each is absent or complete), the lock is free again, and the next apply converges.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuforge.deploy.converge import STAGING_DIR
from gpuforge.lab import ssh_command
from gpuforge.render import render_node
from gpuforge.render.files import Secrets
from gpuforge.render.health import HEALTH_CONFIG, HEALTH_PROGRAM
from gpuforge.spec import load_spec, resolve_nodes
from tests.conftest import REPO

pytestmark = pytest.mark.lab

NODES = ("node1", "node2", "node3")
#: Managed files removed before each apply so that it has uploads to make on every node: one of
#: the first layer (apt's proxy setting) and two of the last (the health check).
APT_PROXY_CONF = "/etc/apt/apt.conf.d/01gpuforge-proxy"
REMOVED = (APT_PROXY_CONF, HEALTH_CONFIG, HEALTH_PROGRAM)


def remove_managed_files(c: Any, nodes: tuple[str, ...] = NODES) -> None:
    for node in nodes:
        c.ssh(node, "rm -f " + " ".join(REMOVED))


def expected(spec_path: Path) -> dict[str, dict[str, str]]:
    """sha256 of each non-secret rendered file, by node."""
    spec = load_spec(spec_path)
    return {
        n.name: {f.path: hashlib.sha256(f.data).hexdigest() for f in render_node(spec, n, Secrets.redacted())}
        for n in resolve_nodes(spec)
    }


def test_a_changed_host_key_is_refused_and_the_node_left_alone(lab_cluster: Any, tmp_path: Path) -> None:
    c = lab_cluster
    real = Path(c.lab.state.known_hosts).read_text().splitlines()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()[:2]
    # known_hosts lines are "node2,<address> <type> <key>": node2's key becomes another one.
    changed = [" ".join([ln.split()[0], *other]) if "node2" in ln.split()[0].split(",") else ln for ln in real if ln]
    assert changed != real
    known = tmp_path / "known_hosts"
    known.write_text("\n".join(changed) + "\n")
    spec = c.write("changed-host-key.yaml", mutate=lambda d: d["ssh"].update(known_hosts=str(known)))
    remove_managed_files(c, ("node2", "node3"))

    result = c.apply(spec)
    assert result["returncode"] != 0 and not result["ok"]
    node2 = result["hosts"]["node2"]
    assert node2["error"] and "unreachable" in node2["error"], node2
    assert c.lab.ssh("node2", f"test -e {HEALTH_CONFIG}").returncode != 0, "node2 was changed"
    assert not result["hosts"]["node3"]["error"] and c.ssh("node3", f"test -s {HEALTH_CONFIG} && echo ok") == "ok\n"

    again = c.apply()  # the real key: node2 converges
    assert again["returncode"] == 0 and again["ok"], again
    assert c.ssh("node2", f"test -s {HEALTH_CONFIG} && echo ok") == "ok\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_apply_leaves_nothing_half_written(lab_cluster: Any, sig: signal.Signals) -> None:
    c = lab_cluster
    remove_managed_files(c)
    want = expected(c.spec_path)
    # The trigger: node2's staging directory is made anew by the first upload of the run.
    c.ssh("node2", f"rm -rf {STAGING_DIR}")
    wait = f"while [ ! -d {STAGING_DIR} ]; do sleep 0.01; done; echo seen"
    seen = subprocess.Popen(ssh_command(c.lab.state, "node2", [wait]), stdout=subprocess.PIPE, text=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuforge.cli", "apply", str(c.spec_path)],
        cwd=REPO,
        env={**os.environ, **c.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = seen.stdout.readline() if seen.stdout else ""  # the apply's first upload is early
    finally:
        seen.kill()
    assert line.strip() == "seen", "no upload was seen on node2"
    proc.send_signal(sig)  # mid-apply: uploads under way
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, "the apply was not interrupted (it finished first)"
    assert "Traceback" not in out + err, err[-2000:]
    assert f"stopped by {sig.name}" in err, err[-2000:]

    for node in NODES:
        for path in REMOVED:
            got = c.lab.ssh(node, f"sha256sum {path} 2>/dev/null | cut -d' ' -f1").stdout.strip()
            assert got in ("", want[node][path]), f"{node}:{path} is half-written"

    result = c.apply()  # the lock was released with the process; the next run converges
    assert result["returncode"] == 0 and result["ok"], result
    for node in NODES:
        for path in REMOVED:
            assert c.lab.ssh(node, f"sha256sum {path} | cut -d' ' -f1").stdout.strip() == want[node][path]
    again = c.apply()
    assert again["returncode"] == 0 and all(not h["changed"] for h in again["hosts"].values()), again
