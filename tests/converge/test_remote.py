"""Remote commands use the validator's SSH transport: host keys always checked."""

from __future__ import annotations

import shlex

from gpuforge.orchestrate.remote import ssh_argv
from gpuforge.spec import load_spec
from tests.conftest import REPO


def test_ssh_argv_checks_host_keys_with_the_specs_known_hosts() -> None:
    spec_path = REPO / "inventories" / "lab.yaml"
    argv = ssh_argv(load_spec(spec_path), spec_path, "node2", "sinfo")
    joined = " ".join(argv)
    assert "StrictHostKeyChecking=yes" in joined
    assert "UserKnownHostsFile=/var/lib/gpuforge/lab/gflab/known_hosts" in joined
    assert argv[-2:] == ["10.213.0.12", "sinfo"]


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
