"""A Vagrant box for the libvirt provider, built here from the lab's rootfs recipe (Debian 12 or 13).

No box can be downloaded on an air-gapped CI machine, so gpuforge builds its own: the lab's
package set (:mod:`gpuforge.lab.rootfs`) plus Debian's generic kernel, as an ext4 filesystem made
with ``mkfs.ext4 -d`` (no loop device, no mount) and converted to qcow2. The VM boots that
kernel directly (libvirt's kernel/initrd/cmdline), so the disk needs no partition table and no
boot loader.

Invariants:
- The box's SSH key is generated for this box (ed25519, 0600, never Vagrant's public insecure
  key); the key, kernel and initrd stay in the box's cache folder, which the box's Vagrantfile
  names by absolute path (the box only makes sense on the machine that built it).
- The box carries no SSH host keys and an empty machine-id: each VM makes its own at first boot.
- A build goes to a temporary folder renamed into place under a file lock: an interrupted build
  leaves no box that looks complete.
- The box boots Debian's generic kernel, not the smaller cloud one: only the generic kernel ships
  Soft-RoCE (``rdma_rxe``) and the NFS server (the lab notes), which the fabric and NFS VM test uses.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass

from .plan import DEFAULT_OS, LAB_RELEASES
from .rootfs import PACKAGES, ensure_rootfs
from .sources import host_mirrors, node_sources
from .system import LabError, file_lock, remove_tree, require_tools, run, write_file

CACHE_DIR = "/var/cache/gpuforge/vagrant"
BOX_NAME = "gpuforge/debian12-local"
SUITE = "bookworm"


def release_box_name(release: str) -> str:
    """The box name of a lab release (``debian13`` -> ``gpuforge/debian13-local``)."""
    return f"gpuforge/{release}-local"


# Bump when the customisation below changes what the box contains.
RECIPE = 4
# Debian 12's generic kernel: rdma_rxe and nfsd's server side (lab notes, "VM kernels"); the cloud
# kernel has neither.
BOX_PACKAGES: tuple[str, ...] = ("linux-image-amd64", "initramfs-tools", "zstd")
DISK_GB = 8
# eth0 is Vagrant's management network (DHCP); Vagrant configures the private network (eth1)
# through systemd-networkd itself.
KERNEL_CMDLINE = "root=/dev/vda rw console=ttyS0 net.ifnames=0 biosdevname=0"
BOX_TOOLS: dict[str, str] = {"mkfs.ext4": "e2fsprogs", "qemu-img": "qemu-utils", "tar": "tar"}

_MGMT_NETWORK = """\
# gpuforge box: Vagrant's management network, addressed by libvirt's DHCP.
[Match]
Name=eth0

[Network]
DHCP=ipv4
"""
HOST_KEYS_UNIT = """\
# gpuforge: every machine made from this image makes its own SSH host keys on first boot.
[Unit]
Description=Generate this machine's SSH host keys
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""


@dataclass(frozen=True)
class Box:
    """A built box: the ``.box`` file Vagrant adds and the files its Vagrantfile names."""

    folder: str
    name: str = BOX_NAME

    @property
    def box_file(self) -> str:
        """``gpuforge-debian13-local.box``, ``gpuforge-<cluster>-<group>.box``: named after the box."""
        return os.path.join(self.folder, self.name.replace("/", "-") + ".box")

    @property
    def private_key(self) -> str:
        return os.path.join(self.folder, "vagrant_key")

    @property
    def kernel(self) -> str:
        return os.path.join(self.folder, "vmlinuz")

    @property
    def initrd(self) -> str:
        return os.path.join(self.folder, "initrd.img")

    def complete(self) -> bool:
        return all(os.path.isfile(p) for p in (self.box_file, self.private_key, self.kernel, self.initrd))


def box_key(suite: str = SUITE) -> str:
    """Stable key of the box recipe (its packages, recipe version and kernel command line)."""
    packages = sorted(set(PACKAGES + BOX_PACKAGES))
    blob = json.dumps(
        {"suite": suite, "packages": packages, "recipe": RECIPE, "cmdline": KERNEL_CMDLINE}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def box_vagrantfile(box: Box, cmdline: str = KERNEL_CMDLINE) -> str:
    """The Vagrantfile inside the box: the box's own key, direct kernel boot, the key never replaced."""

    def rb(s: str) -> str:
        return json.dumps(s)  # a JSON string is a valid Ruby double-quoted literal for these paths

    return "\n".join(
        [
            "# Written by gpuforge: a box built on this machine (gpuforge.lab.vagrant_box).",
            'Vagrant.configure("2") do |config|',
            '  config.ssh.username = "vagrant"',
            f"  config.ssh.private_key_path = [{rb(box.private_key)}]",
            "  config.ssh.insert_key = false",
            "  config.vm.provider :libvirt do |lv|",
            f"    lv.kernel = {rb(box.kernel)}",
            f"    lv.initrd = {rb(box.initrd)}",
            f"    lv.cmd_line = {rb(cmdline)}",
            '    lv.disk_bus = "virtio"',
            "  end",
            "end",
            "",
        ]
    )


def box_metadata() -> str:
    """``metadata.json`` of a libvirt box."""
    return json.dumps({"provider": "libvirt", "format": "qcow2", "virtual_size": DISK_GB}) + "\n"


def customize_tree(tree: str, public_key: str, apt_sources: str) -> None:
    """Make a rootfs copy a Vagrant guest: the vagrant user with the box key, sudo, networkd, host keys at boot.

    ``apt_sources``: the deb822 sources the box keeps (the Debian mirror it was built from), as a
    public box keeps Debian's; a spec's ``apt_proxy`` then sends them through a site mirror.
    """
    for path in ("etc/ssh/ssh_host_ed25519_key", "etc/ssh/ssh_host_rsa_key", "etc/ssh/ssh_host_ecdsa_key"):
        for suffix in ("", ".pub"):
            if os.path.exists(os.path.join(tree, path + suffix)):
                os.unlink(os.path.join(tree, path + suffix))
    run(["chroot", tree, "useradd", "--create-home", "--shell", "/bin/bash", "--user-group", "vagrant"])
    ssh_dir = os.path.join(tree, "home/vagrant/.ssh")
    os.makedirs(ssh_dir, mode=0o700, exist_ok=True)
    write_file(os.path.join(ssh_dir, "authorized_keys"), public_key.strip() + "\n", mode=0o600)
    run(["chroot", tree, "chown", "-R", "vagrant:vagrant", "/home/vagrant/.ssh"])
    write_file(os.path.join(tree, "etc/sudoers.d/vagrant"), "vagrant ALL=(ALL) NOPASSWD: ALL\n", mode=0o440)
    write_file(os.path.join(tree, "etc/systemd/network/10-vagrant-mgmt.network"), _MGMT_NETWORK)
    write_file(os.path.join(tree, "etc/systemd/system/gpuforge-ssh-host-keys.service"), HOST_KEYS_UNIT)
    wants = os.path.join(tree, "etc/systemd/system/multi-user.target.wants")
    os.makedirs(wants, exist_ok=True)
    for unit, target in (
        ("gpuforge-ssh-host-keys.service", "/etc/systemd/system/gpuforge-ssh-host-keys.service"),
        ("systemd-networkd.service", "/lib/systemd/system/systemd-networkd.service"),
    ):
        link = os.path.join(wants, unit)
        if not os.path.lexists(link):
            os.symlink(target, link)
    write_file(os.path.join(tree, "etc/fstab"), "/dev/vda / ext4 defaults,errors=remount-ro 0 1\n")
    write_file(os.path.join(tree, "etc/hostname"), "localhost\n")
    write_file(os.path.join(tree, "etc/apt/sources.list.d/debian.sources"), apt_sources)


def _boot_file(tree: str, prefix: str) -> str:
    found = sorted(f for f in os.listdir(os.path.join(tree, "boot")) if f.startswith(prefix))
    if not found:
        raise LabError(f"the box rootfs has no /boot/{prefix}* (did the kernel package install?)")
    return os.path.join(tree, "boot", found[-1])


def build_box(cache_dir: str = CACHE_DIR, log: Callable[[str], None] = print, release: str = DEFAULT_OS) -> Box:
    """Return the cached box of a lab release (``debian12``, ``debian13``), building it first if needed
    (root, mmdebstrap, e2fsprogs, qemu-utils). Its apt sources name the release's suite."""
    suite = LAB_RELEASES[release]
    key = box_key(suite)
    box = Box(os.path.join(cache_dir, key), release_box_name(release))
    if box.complete():
        return box
    os.makedirs(cache_dir, mode=0o755, exist_ok=True)
    with file_lock(os.path.join(cache_dir, f"{os.path.basename(box.folder)}.lock")):
        if box.complete():
            return box
        require_tools(BOX_TOOLS)
        t0 = time.monotonic()
        base = ensure_rootfs(suite, log=log, extra=BOX_PACKAGES)
        tmp = f"{box.folder}.build-{os.getpid()}"
        remove_tree(tmp)
        os.makedirs(tmp, mode=0o755)
        try:
            _build_into(tmp, base, Box(tmp, box.name), box, key, suite, log)
            remove_tree(box.folder)
            os.rename(tmp, box.folder)
        except BaseException:
            remove_tree(tmp)
            raise
        log(f"vagrant box built in {time.monotonic() - t0:.0f} s: {box.box_file}")
    return box


def _build_into(
    tmp: str, base: str, staging: Box, final: Box, key: str, suite: str, log: Callable[[str], None]
) -> None:
    tree = os.path.join(tmp, "tree")
    run(["cp", "-a", base, tree], timeout=600)
    pack_box(tree, staging, final, f"gpuforge box {key}", node_sources(host_mirrors(), suite), log)


def pack_box(
    tree: str, staging: Box, final: Box, key_comment: str, apt_sources: str, log: Callable[[str], None]
) -> None:
    """Turn ``tree`` (consumed: it is removed) into a box in ``staging.folder``: its own new SSH key, the
    tree made a Vagrant guest, the kernel and initrd from the tree's ``/boot`` beside it, the disk as
    qcow2; the box's Vagrantfile names ``final``'s files (the folder the box will live in)."""
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key_comment, "-f", staging.private_key])
    os.chmod(staging.private_key, 0o600)
    with open(staging.private_key + ".pub") as f:
        customize_tree(tree, f.read(), apt_sources)
    shutil.copyfile(_boot_file(tree, "vmlinuz-"), staging.kernel)
    shutil.copyfile(_boot_file(tree, "initrd.img-"), staging.initrd)
    for path in (staging.kernel, staging.initrd):
        os.chmod(path, 0o644)  # qemu (user libvirt-qemu) reads them
    raw = os.path.join(staging.folder, "disk.raw")
    with open(raw, "wb") as f:
        f.truncate(DISK_GB * 1024**3)
    log("vagrant box: writing the ext4 disk image")
    run(["mkfs.ext4", "-q", "-F", "-L", "gpuforge-root", "-d", tree, raw], timeout=600)
    remove_tree(tree)
    box_dir = os.path.join(staging.folder, "box")
    os.makedirs(box_dir)
    run(["qemu-img", "convert", "-O", "qcow2", raw, os.path.join(box_dir, "box.img")], timeout=600)
    os.unlink(raw)
    write_file(os.path.join(box_dir, "metadata.json"), box_metadata())
    write_file(os.path.join(box_dir, "Vagrantfile"), box_vagrantfile(final))
    run(["tar", "-C", box_dir, "-cf", staging.box_file, "metadata.json", "Vagrantfile", "box.img"], timeout=600)
    remove_tree(box_dir)
