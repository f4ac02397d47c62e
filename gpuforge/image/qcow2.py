"""A qcow2 disk of the image: one ext4 filesystem made with ``mkfs.ext4 -d`` (no loop device, no
mount) converted with ``qemu-img convert``, as ``gpuforge.lab.vagrant_box`` makes the box's disk.

The disk has no partition table and no boot loader: a VM boots it with a kernel given from
outside (libvirt's kernel/initrd/cmdline, ``qemu -kernel``), root on ``/dev/vda``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from gpuforge.image.safe_files import private_temp, replacing

TOOLS = {"mkfs.ext4": "e2fsprogs", "qemu-img": "qemu-utils"}
#: Free room on the filesystem beyond the tree's size (fraction), and its minimum size.
HEADROOM = 0.5
MIN_BYTES = 2 << 30


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def tree_bytes(tree: str) -> int:
    total = 0
    for folder, _, files in os.walk(tree):
        for name in files:
            with_path = os.path.join(folder, name)
            if not os.path.islink(with_path):
                total += os.lstat(with_path).st_size
    return total


def disk_bytes(used: int) -> int:
    """The filesystem size for a tree of ``used`` bytes: headroom, at least MIN_BYTES, MiB-aligned."""
    size = max(MIN_BYTES, int(used * (1 + HEADROOM)))
    return (size + (1 << 20) - 1) // (1 << 20) * (1 << 20)


def mkfs_argv(tree: str, raw: str, size: int) -> list[str]:
    return ["mkfs.ext4", "-q", "-F", "-L", "gpuforge-root", "-d", tree, raw, f"{size // 1024}k"]


def convert_argv(raw: str, out: str) -> list[str]:
    return ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, out]


def write_qcow2(tree: str, out: Path) -> Path:
    """The qcow2 of ``tree`` at ``out``: the raw disk in a private temp file beside it, the qcow2
    written to another and renamed over ``out`` (no predictable name a link could be planted at)."""
    raw = private_temp(os.path.dirname(os.path.abspath(out)), f".{out.name}.", ".raw")
    try:
        subprocess.run(mkfs_argv(tree, raw, disk_bytes(tree_bytes(tree))), check=True, capture_output=True)
        with replacing(str(out)) as tmp:
            subprocess.run(convert_argv(raw, tmp), check=True, capture_output=True)
    finally:
        if os.path.exists(raw):
            os.unlink(raw)
    return out
