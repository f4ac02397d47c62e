"""Remote commands use the validator's SSH transport: host keys always checked."""

from __future__ import annotations

import shlex

import pytest

from gpuforge.orchestrate.remote import ssh_argv
from gpuforge.spec import load_spec, resolve_nodes
from tests.conftest import REPO

H100 = REPO / "inventories" / "slurm-h100.yaml"


def test_ssh_argv_checks_host_keys_with_the_specs_known_hosts() -> None:
    spec_path = REPO / "inventories" / "lab.yaml"
    argv = ssh_argv(load_spec(spec_path), spec_path, "node2", "sinfo")
    joined = " ".join(argv)
    assert "StrictHostKeyChecking=yes" in joined
    assert "UserKnownHostsFile=/var/lib/gpuforge/lab/gflab/known_hosts" in joined
    assert argv[-2:] == ["10.213.0.12", "sinfo"]


def test_only_the_node_lock_session_prefers_the_classic_key_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock session carries no secret: the classic key exchanges, curve25519 first; every other
    session keeps OpenSSH's default (post-quantum hybrid) order."""
    from gpuforge.orchestrate import node_lock

    spec_path = REPO / "inventories" / "lab.yaml"
    spec = load_spec(spec_path)
    assert not any("KexAlgorithms" in a for a in ssh_argv(spec, spec_path, "node2", "sinfo"))
    started: list[list[str]] = []

    class Refused:
        def __init__(self, argv: list[str], **_: object) -> None:
            started.append(argv)
            raise OSError("not started in this test")

    monkeypatch.setattr(node_lock.subprocess, "Popen", Refused)
    locks = node_lock.take(spec, spec_path, ["node2"])
    assert list(locks.refused) == ["node2"]
    (argv,) = started
    assert argv[:2] == ["ssh", "-o"] and argv[2].startswith("KexAlgorithms=curve25519-sha256,")
    assert "sntrup" not in argv[2] and "mlkem" not in argv[2]
    assert argv[-3:-1] == ["--", "10.213.0.12"] and "flock -n 9" in argv[-1]


def test_non_root_user_runs_privileged_commands_with_sudo() -> None:
    spec_path = REPO / "inventories" / "slurm-h100.yaml"
    argv = ssh_argv(load_spec(spec_path), spec_path, "ctl01", "scontrol reconfigure")
    assert argv[-1] == "sudo -n sh -c 'scontrol reconfigure'" and "ansible" in argv


def test_sudo_covers_every_command_of_a_command_line() -> None:
    """``rm ...; systemctl reboot`` once ran the reboot unprivileged: sudo wraps the whole line."""
    spec_path = REPO / "inventories" / "slurm-h100.yaml"
    line = "rm -f /var/lib/gpuforge/reboot-required; systemctl reboot"
    argv = ssh_argv(load_spec(spec_path), spec_path, "gpu001", line)
    assert argv[-1] == "sudo -n sh -c 'rm -f /var/lib/gpuforge/reboot-required; systemctl reboot'"
    assert shlex.split(argv[-1]) == ["sudo", "-n", "sh", "-c", line]


def test_the_deploys_inventory_checks_host_keys_on_every_node() -> None:
    from gpuforge.deploy.inventory import inventory_groups
    from gpuforge.deploy.runstate import RUN_STATE_KEY

    spec = load_spec(H100)
    groups = inventory_groups(spec, H100)
    assert len(groups["nodes"]) == len(resolve_nodes(spec))
    for name, data in groups["nodes"]:
        assert data["ssh_strict_host_key_checking"] == "yes", name
    # One run state, shared by every host of the run.
    assert len({id(data[RUN_STATE_KEY]) for _, data in groups["nodes"]}) == 1
