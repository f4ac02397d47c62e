"""Remote commands use the validator's SSH transport: host keys always checked."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from gpuforge.orchestrate.remote import ssh_argv
from gpuforge.spec import load_spec, resolve_nodes
from gpuforge.spec.cluster import Cluster
from tests.conftest import REPO

H100 = REPO / "inventories" / "slurm-h100.yaml"


def test_ssh_argv_checks_host_keys_with_the_specs_known_hosts() -> None:
    spec_path = REPO / "inventories" / "lab.yaml"
    argv = ssh_argv(Cluster.of(load_spec(spec_path), spec_path), "node2", "sinfo")
    joined = " ".join(argv)
    assert "StrictHostKeyChecking=yes" in joined
    assert "UserKnownHostsFile=/var/lib/gpuforge/lab/gflab/known_hosts" in joined
    assert argv[-2:] == ["10.213.0.12", "sinfo"]


def test_only_sessions_without_secrets_prefer_the_classic_key_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    """The node lock and validate carry no secret: the classic key exchanges, curve25519 first;
    every other session (``gpuforge kubeconfig`` carries admin credentials) keeps OpenSSH's default
    (post-quantum hybrid) order."""
    from gpuforge.orchestrate import node_lock
    from gpuforge.validator import runner

    spec_path = REPO / "inventories" / "lab.yaml"
    spec = load_spec(spec_path)
    assert not any("KexAlgorithms" in a for a in ssh_argv(Cluster.of(spec, spec_path), "node2", "sinfo"))
    started: list[list[str]] = []

    class Refused:
        def __init__(self, argv: list[str], **_: object) -> None:
            started.append(argv)
            raise OSError("not started in this test")

    monkeypatch.setattr(node_lock.subprocess, "Popen", Refused)
    locks = node_lock.take(Cluster.of(spec, spec_path), ["node2"])
    assert list(locks.refused) == ["node2"]

    def ran(argv: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        started.append(argv)
        return subprocess.CompletedProcess(argv, 1, b"", b"")

    monkeypatch.setattr(runner.subprocess, "run", ran)
    runner.validate(Cluster.of(spec, spec_path), checks="connection", limit="node2")
    lock, validate = started
    assert "flock -w 2 9" in lock[-1] and "python3 -" in validate[-1]
    for argv in (lock, validate):
        assert argv[:2] == ["ssh", "-o"] and argv[2].startswith("KexAlgorithms=curve25519-sha256,")
        assert "sntrup" not in argv[2] and "mlkem" not in argv[2]
        assert argv[-3:-1] == ["--", "10.213.0.12"]


def test_non_root_user_runs_privileged_commands_with_sudo() -> None:
    spec_path = REPO / "inventories" / "slurm-h100.yaml"
    argv = ssh_argv(Cluster.of(load_spec(spec_path), spec_path), "ctl01", "scontrol reconfigure")
    assert argv[-1] == "sudo -n sh -c 'scontrol reconfigure'" and "ansible" in argv


def test_sudo_covers_every_command_of_a_command_line() -> None:
    """``rm ...; systemctl reboot`` once ran the reboot unprivileged: sudo wraps the whole line."""
    spec_path = REPO / "inventories" / "slurm-h100.yaml"
    line = "rm -f /var/lib/gpuforge/reboot-required; systemctl reboot"
    argv = ssh_argv(Cluster.of(load_spec(spec_path), spec_path), "gpu001", line)
    assert argv[-1] == "sudo -n sh -c 'rm -f /var/lib/gpuforge/reboot-required; systemctl reboot'"
    assert shlex.split(argv[-1]) == ["sudo", "-n", "sh", "-c", line]


def test_the_deploys_inventory_checks_host_keys_on_every_node() -> None:
    from gpuforge.deploy.inventory import inventory_groups
    from gpuforge.deploy.runstate import RUN_STATE_KEY

    spec = load_spec(H100)
    groups = inventory_groups(Cluster.of(spec, H100))
    assert len(groups["nodes"]) == len(resolve_nodes(spec))
    for name, data in groups["nodes"]:
        assert data["ssh_strict_host_key_checking"] == "yes", name
        # gpuforge.deploy.connect retries a dropped connection itself (never a refusal or a timeout)
        assert data["ssh_connect_retries"] == 0, name
    # One run state, shared by every host of the run.
    assert len({id(data[RUN_STATE_KEY]) for _, data in groups["nodes"]}) == 1


def _lock_sessions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, failures: list[str]) -> list[str]:
    """Route lock sessions to local shells: the n-th session fails as ``failures[n]`` says (an ssh
    exit 255 with that stderr) until they run out, then takes the lock in a local directory."""
    from gpuforge.orchestrate import node_lock

    started: list[str] = []

    def argv(cluster: object, name: str, command: str, options: tuple[str, ...] = ()) -> list[str]:
        started.append(name)
        if len(started) <= len(failures):
            return ["sh", "-c", f"printf %s {shlex.quote(failures[len(started) - 1])} >&2; exit 255"]
        return ["sh", "-c", command.replace(node_lock.LOCK_DIR, shlex.quote(str(tmp_path)))]

    monkeypatch.setattr(node_lock, "ssh_argv", argv)
    monkeypatch.setattr(node_lock, "RETRY_PAUSE_S", 0.01)
    return started


def test_a_lock_session_that_ssh_ends_is_tried_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A busy node's sshd hung up twice (ssh exit 255, no message at LogLevel=ERROR): the third
    try takes the lock and the node is in the run."""
    from gpuforge.orchestrate import node_lock

    spec_path = REPO / "inventories" / "lab.yaml"
    started = _lock_sessions(monkeypatch, tmp_path, ["", "kex_exchange_identification: Connection closed"])
    locks = node_lock.take(Cluster.of(load_spec(spec_path), spec_path), ["node2"])
    try:
        assert list(locks.held) == ["node2"] and locks.refused == {}
        assert started == ["node2"] * 3
    finally:
        locks.release()


@pytest.mark.parametrize(
    "stderr",
    [
        "Host key verification failed.",
        "gfadmin@10.213.0.12: Permission denied (publickey).",
        "ssh: connect to host 10.213.0.12 port 22: Connection timed out",  # ConnectTimeout already spent
        "ssh: connect to host 10.213.0.12 port 22: No route to host",
        "ssh: connect to host 10.213.0.12 port 22: Connection refused",
    ],
)
def test_a_refused_lock_session_is_not_tried_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stderr: str
) -> None:
    from gpuforge.orchestrate import node_lock

    spec_path = REPO / "inventories" / "lab.yaml"
    started = _lock_sessions(monkeypatch, tmp_path, [stderr] * 3)
    locks = node_lock.take(Cluster.of(load_spec(spec_path), spec_path), ["node2"])
    assert started == ["node2"] and locks.held == {}
    assert locks.refused["node2"].startswith("unreachable over SSH: ")


def test_a_node_that_never_answers_is_left_out_after_the_last_try(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gpuforge.orchestrate import node_lock

    spec_path = REPO / "inventories" / "lab.yaml"
    started = _lock_sessions(monkeypatch, tmp_path, [""] * node_lock.TAKE_TRIES)
    locks = node_lock.take(Cluster.of(load_spec(spec_path), spec_path), ["node2"])
    assert len(started) == node_lock.TAKE_TRIES and locks.held == {}
    assert locks.refused["node2"] == (
        "unreachable over SSH: ssh exited with status 255 and no message: the node closed the connection "
        "after the key exchange"
    )
