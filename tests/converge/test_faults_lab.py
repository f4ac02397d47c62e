"""Faults during an apply, for real on the lab (issue 14, item 13).

- A node whose host key changed is refused (named, with the cause); nothing on it changes, the
  other nodes converge; with the right key the next apply finishes it.
- An apply stopped by SIGTERM or SIGINT part-way: no traceback, no file half-written at its
  real path (each is absent or complete), the lock is free again, and the next apply converges.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuforge.deploy.converge import STAGING_DIR
from gpuforge.deploy.secrets import SecretStore
from gpuforge.lab import ssh_command
from gpuforge.render import render_node
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


def expected(c: Any) -> dict[str, dict[str, str]]:
    """sha256 of each rendered file, by node, rendered with the secrets apply stored (health.json
    carries keyed digests made with them)."""
    spec = load_spec(c.spec_path)
    secrets = SecretStore(spec.cluster.name, c.state_dir).load()
    return {
        n.name: {f.path: hashlib.sha256(f.data).hexdigest() for f in render_node(spec, n, secrets)}
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
    want = expected(c)
    # The trigger: node2's staging directory is made anew by the first upload of the run.
    c.ssh("node2", f"rm -rf {STAGING_DIR}")
    wait = f"while [ ! -d {STAGING_DIR} ]; do sleep 0.01; done; echo seen"
    seen = subprocess.Popen(ssh_command(c.lab.state, "node2", [wait]), stdout=subprocess.PIPE, text=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuforge", "apply", "--yes", str(c.spec_path)],
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


def test_a_node_held_by_another_run_is_left_out_naming_the_holder(lab_cluster: Any) -> None:
    """Another control host (here: an SSH session from this test) holds node2's apply lock: the apply
    leaves node2 alone, names the holder and converges the others; once the holder's session dies
    (killed, as a crashed control host's would), the next apply takes node2."""
    from gpuforge.orchestrate.node_lock import HELD, lock_command

    c = lab_cluster
    remove_managed_files(c)
    holder = "ann@ctl-b pid 4242 since 2026-11-23T10:00:00Z (other-cluster.yaml)"
    ssh = ssh_command(c.lab.state, "node2", [lock_command(holder)])
    other = subprocess.Popen(ssh, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert other.stdout is not None and other.stdout.readline().decode().strip() == HELD
        result = c.apply()
        assert result["returncode"] == 1 and not result["ok"], result
        assert result["hosts"]["node2"]["error"] == f"another gpuforge apply holds this node: {holder}"
        assert c.lab.ssh("node2", f"test -e {HEALTH_CONFIG}").returncode != 0, "node2 was changed"
        for node in ("node1", "node3"):
            assert result["hosts"][node]["error"] is None
            assert c.ssh(node, f"test -s {HEALTH_CONFIG} && echo ok") == "ok\n"
    finally:
        other.kill()
        other.wait(timeout=30)
    again = c.apply()
    assert again["returncode"] == 0 and again["ok"], again
    assert c.ssh("node2", f"test -s {HEALTH_CONFIG} && echo ok") == "ok\n"
    # The run let go of every node's lock at its end.
    for node in NODES:
        assert c.ssh(node, "flock -n /run/gpuforge/apply.lock true && echo free") == "free\n"


def test_a_node_that_dies_mid_apply_fails_alone_and_the_rerun_finishes_it(lab_cluster: Any) -> None:
    """node3 powers off while the apply is writing its files: node3 fails, named; node1 and node2
    converge; once node3 is back (``lab up`` repairs it) the next apply finishes it."""
    import time

    c = lab_cluster
    remove_managed_files(c)
    cmd = [sys.executable, "-m", "gpuforge", "apply", "--yes", str(c.spec_path), "--json"]
    apply = subprocess.Popen(
        cmd, cwd=REPO, env={**os.environ, **c.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # node3's first layer is written: the run is under way there
            if c.lab.ssh("node3", f"test -e {APT_PROXY_CONF}").returncode == 0:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the apply never reached node3")
        c.lab.ssh("node3", "systemctl poweroff --force --force")
        out, err = apply.communicate(timeout=600)
    finally:
        if apply.poll() is None:
            apply.kill()
    try:
        assert "Traceback" not in err, err
        result = json.loads(out)
        assert apply.returncode == 1 and not result["ok"], result
        # Where the node went away decides the words: mid-command, while connecting, between
        # commands, or with an operation begun and never answered.
        error = result["hosts"]["node3"]["error"] or ""
        assert any(words in error for words in NODE_GONE_WORDS), result["hosts"]["node3"]
        for node in ("node1", "node2"):
            assert result["hosts"][node]["error"] is None, result["hosts"][node]
            assert c.ssh(node, f"test -s {HEALTH_CONFIG} && echo ok") == "ok\n"
    finally:  # node3 comes back even when an assertion failed: the tests after this one share the lab
        bring_back(c, "node3")
    assert c.lab.ssh("node3", "true").returncode == 0
    again = c.apply()
    assert again["returncode"] == 0 and again["ok"], again
    assert c.ssh("node3", f"test -s {HEALTH_CONFIG} && echo ok") == "ok\n"


NODE_GONE_WORDS = (
    "connection to the node was lost mid-run",
    "unreachable",
    "failed without a word",
    "the run stopped on this node before its last operation",
)


def bring_back(c: Any, node: str) -> None:
    """Waits for the powered-off container to be gone, then ``lab up`` boots it again."""
    import time

    from gpuforge.lab import node as lab_node

    deadline = time.monotonic() + 120
    while lab_node.nspawn_pid(c.lab.name, node) is not None and time.monotonic() < deadline:
        time.sleep(0.5)  # the container is gone before the lab repairs it
    c.lab.up()


def test_a_stopped_site_mirror_fails_the_node_that_needs_it_naming_the_package(lab_cluster: Any) -> None:
    """The site mirror is down while node3 needs a package (its apt cache emptied): node3 fails with
    apt's own words naming the package; node1 and node2, which need nothing from it, converge; with
    the mirror back (``lab up`` repairs it) the next apply installs it."""
    from gpuforge.lab.core import LabPaths
    from gpuforge.lab.mirror import stop_mirror

    c = lab_cluster
    c.ssh("node3", "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q prometheus-node-exporter && apt-get clean")
    remove_managed_files(c, ("node1", "node2"))
    assert stop_mirror(LabPaths(c.lab.name).mirror_dir), "the lab's mirror was not running"
    try:
        result = c.apply()
    finally:
        c.lab.up()  # the mirror again
    assert result["returncode"] == 1 and not result["ok"], result
    error = result["hosts"]["node3"]["error"] or ""
    assert "prometheus-node-exporter" in error and ("Failed to fetch" in error or "Unable to" in error), error
    for node in ("node1", "node2"):
        assert result["hosts"][node]["error"] is None, result["hosts"][node]
        assert c.ssh(node, f"test -s {HEALTH_CONFIG} && echo ok") == "ok\n"

    again = c.apply()
    assert again["returncode"] == 0 and again["ok"], again
    assert c.ssh("node3", "systemctl is-active prometheus-node-exporter") == "active\n"
