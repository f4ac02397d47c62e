"""Vagrant nodes are plain SSH hosts to the deploys: address, port, user and key from `vagrant ssh-config`.

pyinfra's own ``@vagrant`` connector is not used: it runs ``vagrant ssh-config`` in threads that
gevent cannot fork from (a traceback and "No running Vagrant instances" on a real VM, seen here).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuforge.deploy.inventory import inventory_groups
from gpuforge.probes import vagrant
from gpuforge.probes.vagrant import VagrantError, machines_for
from gpuforge.spec import load_spec
from gpuforge.spec.cluster import Cluster
from tests.conftest import REPO, run_cli

SPEC = REPO / "inventories" / "vagrant.yaml"
SSH_CONFIG = """\
Host node1
  HostName 192.168.121.57
  User vagrant
  Port 22
  IdentityFile /var/cache/gpuforge/vagrant/k/vagrant_key
Host node2
  HostName 192.168.121.58
  User vagrant
  Port 2200
  IdentityFile /var/cache/gpuforge/vagrant/k/vagrant_key
Host node3
  HostName 192.168.121.59
  User vagrant
  Port 22
"""


def _fake_vagrant(monkeypatch: pytest.MonkeyPatch, stdout: str, rc: int = 0, calls: list[Any] | None = None) -> None:
    def fake_run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        if calls is not None:
            calls.append((argv, kw.get("cwd")))
        return subprocess.CompletedProcess(argv, rc, stdout, "" if rc == 0 else "A Vagrant environment is required")

    monkeypatch.setattr(vagrant.subprocess, "run", fake_run)


def test_vagrant_nodes_get_their_ssh_settings_from_vagrant(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    _fake_vagrant(monkeypatch, SSH_CONFIG, calls=calls)
    spec = load_spec(SPEC)
    groups = inventory_groups(Cluster.of(spec, SPEC))
    data = dict(groups["nodes"])
    assert list(data) == ["node1", "node2", "node3"]  # node names, not pyinfra's "@vagrant/..." form
    assert calls == [(["vagrant", "ssh-config"], str(SPEC.parent))]  # once, in the spec's folder
    assert data["node2"]["ssh_hostname"] == "192.168.121.58" and data["node2"]["ssh_port"] == 2200
    assert data["node1"]["ssh_user"] == "vagrant" and data["node1"]["_sudo"] is True
    assert data["node1"]["ssh_key"] == "/var/cache/gpuforge/vagrant/k/vagrant_key"
    assert "ssh_key" not in data["node3"]  # none in ssh-config, none in the spec
    for entry in data.values():
        assert entry["ssh_strict_host_key_checking"] == "yes"  # Vagrant's own "no" is never taken
        assert entry["ssh_known_hosts_file"] == ".vagrant/known_hosts"
    assert [n for n, _ in groups["group_workers"]] == ["node2", "node3"]


def test_a_vagrant_machine_that_is_not_up_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_vagrant(monkeypatch, SSH_CONFIG.split("Host node3")[0])
    with pytest.raises(VagrantError, match=r"lists no machine node3 \(is it up\?\)"):
        inventory_groups(Cluster.of(load_spec(SPEC), SPEC))
    assert machines_for([], "/nonexistent") == {}  # no vagrant node: vagrant is not asked


def test_vagrant_failures_are_vagrant_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_vagrant(monkeypatch, "", rc=1)
    with pytest.raises(VagrantError, match="A Vagrant environment is required"):
        machines_for(["node1"], "/tmp")

    def missing(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(2, "No such file or directory", "vagrant")

    monkeypatch.setattr(vagrant.subprocess, "run", missing)
    with pytest.raises(VagrantError, match="No such file or directory"):
        machines_for(["node1"], "/tmp")


@pytest.mark.parametrize("command", ["plan", "apply"])
def test_plan_and_apply_without_vagrant_machines_say_so_without_a_traceback(tmp_path: Path, command: str) -> None:
    """No Vagrantfile beside the spec (or no vagrant at all): the reason, exit 1, no host touched."""
    spec, known_hosts = tmp_path / "vagrant.yaml", tmp_path / "known_hosts"
    known_hosts.write_text("")
    spec.write_text(SPEC.read_text().replace("known_hosts: .vagrant/known_hosts", f"known_hosts: {known_hosts}"))
    cp = run_cli(
        command,
        *(["--yes"] if command == "apply" else []),
        str(spec),
        env={"GPUFORGE_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"},
    )
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "Traceback" not in cp.stderr + cp.stdout
    # plan: one line; apply: each node's lock could not be taken, for that reason
    assert "vagrant ssh-config" in (cp.stderr if command == "plan" else cp.stdout), cp.stdout + cp.stderr
