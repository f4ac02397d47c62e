"""The Vagrant box's own files (its Vagrantfile and metadata), without building one."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuforge.lab import vagrant_box
from gpuforge.lab.vagrant_box import Box, box_key, box_metadata, box_vagrantfile


def test_box_vagrantfile_uses_the_box_key_and_boots_the_kernel_directly() -> None:
    box = Box("/var/cache/gpuforge/vagrant/abc")
    text = box_vagrantfile(box)
    assert 'config.ssh.private_key_path = ["/var/cache/gpuforge/vagrant/abc/vagrant_key"]' in text
    assert "config.ssh.insert_key = false" in text
    assert 'lv.kernel = "/var/cache/gpuforge/vagrant/abc/vmlinuz"' in text
    assert 'lv.initrd = "/var/cache/gpuforge/vagrant/abc/initrd.img"' in text
    assert 'lv.cmd_line = "root=/dev/vda rw console=ttyS0 net.ifnames=0 biosdevname=0"' in text
    assert "insecure" not in text


def test_box_vagrantfile_is_valid_ruby(tmp_path: Path) -> None:
    ruby = shutil.which("ruby")
    assert ruby, "ruby comes with vagrant (scripts/setup.sh installs it)"
    path = tmp_path / "Vagrantfile"
    path.write_text(box_vagrantfile(Box('/var/cache/a "quoted" dir')))
    cp = subprocess.run([ruby, "-c", str(path)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "Syntax OK" in cp.stdout, cp.stderr


def test_box_metadata_names_the_libvirt_provider() -> None:
    assert json.loads(box_metadata()) == {"provider": "libvirt", "format": "qcow2", "virtual_size": 8}


def test_box_key_follows_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    key = box_key()
    assert key == box_key() and len(key) == 16
    monkeypatch.setattr(vagrant_box, "RECIPE", vagrant_box.RECIPE + 1)
    assert box_key() != key
    monkeypatch.setattr(vagrant_box, "BOX_PACKAGES", (*vagrant_box.BOX_PACKAGES, "htop"))
    assert box_key() != key


def test_the_box_boots_debians_generic_kernel() -> None:
    """The fabric/NFS VM test needs rdma_rxe and nfsd: Debian's generic kernel has them, the cloud one not."""
    assert vagrant_box.BOX_PACKAGES[0] == "linux-image-amd64"
