"""Real lab nodes (root + systemd-nspawn): boot, SSH, names, site mirror, idempotency, repair, down."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from gpuforge.lab import core, network, node, plan
from gpuforge.lab.lab_record import LabPaths
from gpuforge.lab.system import LabError

pytestmark = pytest.mark.lab


def _ssh_strict(state, node_name: str, known_hosts: str, cmd: str) -> subprocess.CompletedProcess[str]:
    addr = state.node(node_name).address
    argv = [
        "ssh", "-F", "none", "-i", state.ssh_key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
        "-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10", f"root@{addr}", cmd,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_three_nodes_come_up(lab):
    assert [(n.name, n.address) for n in lab.state.nodes] == [
        ("node1", "10.213.9.11"),
        ("node2", "10.213.9.12"),
        ("node3", "10.213.9.13"),
    ]
    assert sorted(lab.pids()) == ["node1", "node2", "node3"]
    for n in lab.state.nodes:
        cp = lab.ssh(n.name, "systemctl is-system-running --wait; cat /proc/1/comm")
        assert cp.stdout.split()[-1] == "systemd", cp.stdout + cp.stderr
        assert cp.stdout.split()[0] in ("running", "degraded"), cp.stdout


def test_ssh_checks_host_keys(lab, tmp_path):
    for n in lab.state.nodes:
        cp = _ssh_strict(lab.state, n.name, lab.state.known_hosts, "hostname")
        assert cp.returncode == 0, cp.stderr
        assert cp.stdout.strip() == n.name
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    cp = _ssh_strict(lab.state, "node1", str(empty), "true")
    assert cp.returncode != 0
    assert "Host key verification failed" in cp.stderr
    # keys are per node, not shared by the base image
    with open(lab.state.known_hosts) as f:
        keys = [line.split()[2] for line in f]
    assert len(set(keys)) == len(lab.state.nodes)


def test_nodes_resolve_each_other(lab):
    want = {n.name: n.address for n in lab.state.nodes}
    for n in lab.state.nodes:
        cp = lab.ssh(n.name, "getent hosts " + " ".join(want) + "; hostname")
        assert cp.returncode == 0, cp.stderr
        lines = cp.stdout.split("\n")
        got = {line.split()[1]: line.split()[0] for line in lines if len(line.split()) == 2}
        assert got == want
        assert lines[-2] == n.name


def test_apt_install_through_site_mirror(lab):
    cp = lab.ssh("node2", "apt-config dump | grep -i proxy; apt-get update -q && apt-get install -y -q hello && hello")
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    assert f'Acquire::http::Proxy "http://{lab.state.bridge_address}:3142"' in cp.stdout
    assert "Hello, world!" in cp.stdout
    log = os.path.join(lab.state.state_dir, "mirror", "log", "apt-cacher.log")
    with open(log) as f:
        text = f.read()
    assert "hello_" in text and lab.state.node("node2").address in text
    # no route out: only the bridge address answers (192.0.2.1 is TEST-NET-1, never routed)
    probe = (
        'python3 -c "import socket; s=socket.socket(); s.settimeout(2); '
        "print(s.connect_ex(('192.0.2.1', 80)), s.close())\""
    )
    cp = lab.ssh("node2", probe)
    assert cp.returncode == 0 and not cp.stdout.startswith("0 "), cp.stdout


def test_up_twice_restarts_nothing(lab):
    before = lab.pids()
    lab.up()
    assert lab.pids() == before


def test_killed_node_is_repaired(lab):
    before = lab.pids()
    os.kill(before["node3"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while "node3" in lab.pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    lab.up()
    after = lab.pids()
    assert after["node3"] != before["node3"]
    assert after["node1"] == before["node1"] and after["node2"] == before["node2"]
    assert node.orphan_inits(lab.name) == []  # the killed container's systemd is gone too
    cp = lab.ssh("node3", "hostname")
    assert cp.stdout.strip() == "node3", cp.stderr


def _live_processes(pattern: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if pattern in line and not line.lstrip().startswith("Z")]


def test_grow_then_down_leaves_nothing():
    name, subnet = "gflab-t2", "10.213.10.0/24"
    paths = LabPaths(name)
    try:
        core.up(name, 1, subnet)
        state = core.up(name, 2, subnet)  # grow: node2 joins, node1 learns its name
        assert [n.name for n in state.nodes] == ["node1", "node2"]
        with open(state.known_hosts) as f:
            assert [line.split()[0] for line in f] == ["node1,10.213.10.11", "node2,10.213.10.12"]
        cp = subprocess.run(
            core.ssh_command(state, "node1", ["getent hosts node2"]), capture_output=True, text=True, timeout=60
        )
        assert cp.stdout.split()[0] == "10.213.10.12", cp.stderr
        # Simulate a crash that lost the state file: down must still find everything by name.
        os.unlink(paths.state_file)
    finally:
        gone = core.down(name)
    assert any(g.startswith("container pid") for g in gone)
    assert not plan.owned_netns(name, network.netns_list())
    assert not plan.owned_links(name, network.link_list())
    assert "gf-gflab-t2" not in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert "gf-gflab-t2" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert _live_processes("--machine=gf-gflab-t2-") == []
    assert _live_processes(paths.mirror_dir) == []
    assert node.orphan_inits(name) == []
    with open("/proc/self/mountinfo") as f:
        assert paths.dir not in f.read()
    assert core.status(name) is None


def test_failed_up_leaves_nothing_running(monkeypatch: pytest.MonkeyPatch):
    """A new lab that does not come up is rolled back whole. The containers really start; the
    wait for SSH then fails (injected: a short timeout is no failure when nodes boot fast)."""
    name, subnet = "gflab-t3", "10.213.11.0/24"
    paths = LabPaths(name)
    started: list[str] = []

    def no_ssh(paths: LabPaths, name: str, nodes: list[tuple[str, str]], *args: object) -> None:
        started.extend(n for n, _ in nodes if node.nspawn_pid(name, n) is not None)
        raise LabError(f"{', '.join(n for n, _ in nodes)} did not answer SSH (injected)")

    monkeypatch.setattr(node, "wait_booted", no_ssh)
    try:
        with pytest.raises(LabError, match="did not"):
            core.up(name, 2, subnet, log=lambda m: None)
        assert started == ["node1", "node2"], "the containers were running when the wait failed"
        assert core.status(name) is None
        assert not plan.owned_netns(name, network.netns_list())
        assert _live_processes("--machine=gf-gflab-t3-") == []
        assert _live_processes(paths.mirror_dir) == []
    finally:
        core.down(name, log=lambda m: None)
