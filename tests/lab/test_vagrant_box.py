"""The Vagrant box's own files (its Vagrantfile and metadata), without building one."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuforge.image import bootable
from gpuforge.image.bootable import box_name
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


def test_a_box_file_is_named_after_its_box() -> None:
    assert Box("/b", "gpuforge/debian13-local").box_file == "/b/gpuforge-debian13-local.box"
    assert Box("/b", box_name("gffabric", "workers")).box_file == "/b/gpuforge-gffabric-workers.box"


@pytest.mark.parametrize(("base_os", "suite"), [("debian12", "bookworm"), ("debian13", "trixie")])
def test_a_baked_box_gets_apt_sources_of_its_own_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_os: str, suite: str
) -> None:
    """A Debian 13 image's box once got bookworm's sources: apt on the VM then chose bookworm's packages."""
    seen: dict[str, str] = {}
    monkeypatch.setattr(bootable, "run", lambda argv, timeout=0: None)
    monkeypatch.setattr(
        bootable, "pack_box", lambda tree, staging, final, comment, sources, log: seen.update(s=sources)
    )
    bootable.write_vagrant_box(str(tmp_path / "tree"), tmp_path, "gpuforge/c-g", print, base_os)
    suites = [line.split(": ", 1)[1] for line in seen["s"].splitlines() if line.startswith("Suites: ")]
    assert suites == [f"{suite} {suite}-updates", f"{suite}-security"], seen["s"]
