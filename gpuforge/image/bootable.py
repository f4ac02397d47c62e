"""What makes an image bootable as a VM: the kernel inside it, its boot files beside the disk, and a
Vagrant box of it.

The image build's base (the lab's Debian 12 rootfs) carries no kernel: a container shares the host's.
A disk a VM boots (``qcow2``, ``vagrant``) needs one inside the image, matching the modules the image
loads, so for those formats the build installs the same kernel packages the lab's Vagrant box boots
(:data:`gpuforge.lab.vagrant_box.BOX_PACKAGES`: Debian's generic kernel, which ships ``rdma_rxe`` and
the NFS server) into the build container before it stops, through the container's own apt.

Invariants: the disk has no boot loader; ``vmlinuz`` and ``initrd.img`` are written beside it (a VM
boots them directly: ``qemu -kernel``, libvirt's kernel/initrd); the Vagrant box is made from a copy
of the stripped, checked tree, so its vagrant user and key exist only in the box, never in the
rootfs, OCI or qcow2 outputs.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

from gpuforge.lab.lab_record import LabState
from gpuforge.lab.plan import LAB_RELEASES
from gpuforge.lab.sources import host_mirrors, node_sources
from gpuforge.lab.system import LabError, remove_tree, run
from gpuforge.lab.vagrant_box import BOX_PACKAGES, Box, pack_box

#: Formats that boot a VM, so need a kernel inside the image.
BOOTABLE = frozenset({"qcow2", "vagrant"})
KERNEL_FILE, INITRD_FILE = "vmlinuz", "initrd.img"
Log = Callable[[str], None]


def needs_kernel(formats: tuple[str, ...]) -> bool:
    return bool(BOOTABLE & set(formats))


def kernel_install_command(packages: tuple[str, ...] = BOX_PACKAGES) -> str:
    """The shell command the build container runs: its own apt, no recommends, no prompt."""
    names = " ".join(shlex.quote(p) for p in packages)
    return (
        "export DEBIAN_FRONTEND=noninteractive && apt-get update -q && "
        f"apt-get install -y -q --no-install-recommends {names}"
    )


def install_kernel(lab: LabState, log: Log) -> None:
    """Install the kernel packages into the (running) build container over SSH as root."""
    node = lab.nodes[0]
    argv = ["ssh", "-i", lab.ssh_key, "-o", f"UserKnownHostsFile={lab.known_hosts}", "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes", f"root@{node.address}", kernel_install_command()]  # fmt: skip
    log(f"image: installing the kernel ({', '.join(BOX_PACKAGES)}) for the bootable formats")
    run(argv, timeout=1800)


def boot_files(tree: str) -> tuple[str, str]:
    """(kernel, initrd) in the tree's ``/boot``: the newest of each; :class:`LabError` when absent."""
    boot = os.path.join(tree, "boot")
    found: list[str] = []
    for prefix in ("vmlinuz-", "initrd.img-"):
        names = sorted(f for f in os.listdir(boot) if f.startswith(prefix)) if os.path.isdir(boot) else []
        if not names:
            raise LabError(f"the image has no /boot/{prefix}* (the kernel install did not take)")
        found.append(os.path.join(boot, names[-1]))
    return found[0], found[1]


def kernel_release(tree: str) -> str:
    """The kernel release the image boots (``6.1.0-28-amd64``): the name of its ``vmlinuz-<release>``."""
    return os.path.basename(boot_files(tree)[0]).removeprefix("vmlinuz-")


def write_boot_files(tree: str, out: Path) -> tuple[Path, Path]:
    """Copy the kernel and initrd beside the disk, readable by qemu's user."""
    kernel, initrd = boot_files(tree)
    written = (out / KERNEL_FILE, out / INITRD_FILE)
    for src, dst in zip((kernel, initrd), written, strict=True):
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o644)
    return written


def closed_folder(path: Path) -> Path | None:
    """The first folder on ``path``'s way from ``/`` that other users cannot enter (None: all can).
    libvirt runs qemu as its own user, which must reach the box's kernel and initrd."""
    for folder in (*reversed(path.resolve().parents), path.resolve()):
        if not folder.stat().st_mode & 0o001:
            return folder
    return None


def box_name(cluster: str, group: str) -> str:
    """The name Vagrant adds the image's box under."""
    return f"gpuforge/{cluster}-{group}"


def write_vagrant_box(tree: str, out: Path, name: str, log: Log, base_os: str) -> Box:
    """A libvirt Vagrant box of the image in ``out/vagrant``: its own key, direct kernel boot, and apt
    sources of the image's own release (``base_os``: ``debian12``, ``debian13``) through the site mirror."""
    folder = out / "vagrant"
    remove_tree(str(folder))
    folder.mkdir(parents=True)
    box = Box(str(folder), name)
    copy = str(folder / "tree")
    run(["cp", "-a", tree, copy], timeout=1200)
    sources = node_sources(host_mirrors(), LAB_RELEASES[base_os])
    pack_box(copy, box, box, f"gpuforge image box {name}", sources, log)
    return box
