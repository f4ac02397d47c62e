"""The Vagrantfile (real VMs) and parsing of `vagrant ssh-config`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from gpuforge.probes.vagrant import VagrantHost, parse_ssh_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Vagrant prints an option that turns host-key checking off; the parser ignores it.
VAGRANT_HOST_KEY_OPTION = "StrictHostKeyChecking " + "no"
SAMPLE = """\
Host node1
  HostName 192.168.121.57
  User vagrant
  Port 22
  UserKnownHostsFile /dev/null
  {vagrant_host_key_option}
  PasswordAuthentication no
  IdentityFile /home/dev/gpuforge/.vagrant/machines/node1/libvirt/private_key
  IdentitiesOnly yes
  LogLevel FATAL
  PubkeyAcceptedKeyTypes +ssh-rsa
  HostKeyAlgorithms +ssh-rsa

Host node2
  HostName 127.0.0.1
  User vagrant
  Port 2200
  UserKnownHostsFile /dev/null
  {vagrant_host_key_option}
  PasswordAuthentication no
  IdentityFile "/home/dev/my projects/gpuforge/.vagrant/machines/node2/virtualbox/private_key"
  IdentitiesOnly yes
  LogLevel FATAL

Host node3
  HostName=127.0.0.1
  User=vagrant
  Port=2201
""".replace("{vagrant_host_key_option}", VAGRANT_HOST_KEY_OPTION)


def test_parse_ssh_config():
    hosts = parse_ssh_config(SAMPLE)
    assert list(hosts) == ["node1", "node2", "node3"]
    assert hosts["node1"] == VagrantHost(
        "node1", "192.168.121.57", 22, "vagrant", "/home/dev/gpuforge/.vagrant/machines/node1/libvirt/private_key"
    )
    assert hosts["node2"].port == 2200
    key2 = "/home/dev/my projects/gpuforge/.vagrant/machines/node2/virtualbox/private_key"
    assert hosts["node2"].identity_file == key2
    assert hosts["node3"] == VagrantHost("node3", "127.0.0.1", 2201, "vagrant", None)
    assert parse_ssh_config("") == {}


def test_vagrantfile_matches_lab_addressing():
    with open(os.path.join(ROOT, "Vagrantfile")) as f:
        text = f.read()
    # Workstation defaults (a public Debian box, KVM); CI picks its local box and TCG by environment.
    assert 'BOX = ENV.fetch("GPUFORGE_VAGRANT_BOX", "debian/bookworm64")' in text and "config.vm.box = BOX" in text
    assert 'LIBVIRT_DRIVER = ENV.fetch("GPUFORGE_LIBVIRT_DRIVER", "kvm")' in text
    assert 'NET = "10.213.0"' in text and "10 + i" in text
    assert ":libvirt" in text and ":virtualbox" in text


def test_vagrant_validate(tmp_path: Path) -> None:
    """The user-facing Vagrantfile is valid for Vagrant with the libvirt provider that setup installs."""
    vagrant = shutil.which("vagrant")
    assert vagrant, "vagrant is not installed: scripts/setup.sh installs vagrant and vagrant-libvirt"
    # Validate a copy so that vagrant's .vagrant/ state dir is not left in the repository.
    shutil.copy(os.path.join(ROOT, "Vagrantfile"), tmp_path / "Vagrantfile")
    env = dict(os.environ, VAGRANT_CWD=str(tmp_path), VAGRANT_CHECKPOINT_DISABLE="1")
    env["VAGRANT_DEFAULT_PROVIDER"] = "libvirt"
    cp = subprocess.run([vagrant, "validate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "validated successfully" in cp.stdout
