"""A baked node image as the lab's base root filesystem (``gpuforge lab up --image``).

The image is a root filesystem tarball or an OCI image layout (``gpuforge image build``). It is
unpacked once into ``/var/cache/gpuforge/images/<key>/rootfs``, ``<key>`` the tarball's or the
manifest's digest, through a temporary folder renamed into place under a file lock. Nodes boot
from it as from the stock rootfs and get their identity (host keys, machine-id, hostname) at boot
as they always do (:func:`gpuforge.lab.node.write_identity`).
"""

from __future__ import annotations

import hashlib
import json
import os

from .system import LabError, file_lock, remove_tree, run

CACHE_DIR = "/var/cache/gpuforge/images"
CHUNK = 1 << 20


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def oci_layers(layout: str) -> tuple[str, list[str]]:
    """(manifest digest, layer blob paths in order) of an OCI layout of one image."""
    try:
        with open(os.path.join(layout, "index.json")) as f:
            manifests = json.load(f)["manifests"]
        digest = manifests[0]["digest"]
        with open(os.path.join(layout, "blobs", *digest.split(":", 1))) as f:
            layers = json.load(f)["layers"]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise LabError(f"--image {layout}: not an OCI image layout gpuforge can read ({exc})") from None
    return digest, [os.path.join(layout, "blobs", *d["digest"].split(":", 1)) for d in layers]


def _sources(image: str) -> tuple[str, list[str]]:
    if os.path.isdir(image):
        digest, layers = oci_layers(image)
        return digest.split(":", 1)[1][:16], layers
    if os.path.isfile(image):
        return _sha256(image)[:16], [image]
    raise LabError(f"--image {image}: no such file or OCI layout folder")


def image_rootfs(image: str, cache_dir: str = CACHE_DIR) -> str:
    """The unpacked root filesystem of ``image`` (a tarball or an OCI layout folder)."""
    key, tars = _sources(os.path.abspath(image))
    final = os.path.join(cache_dir, key)
    rootfs = os.path.join(final, "rootfs")
    if os.path.isfile(os.path.join(rootfs, "etc/os-release")):
        return rootfs
    os.makedirs(cache_dir, exist_ok=True)
    with file_lock(os.path.join(cache_dir, f"{key}.lock")):
        if os.path.isfile(os.path.join(rootfs, "etc/os-release")):
            return rootfs
        tmp = os.path.join(cache_dir, f".unpack-{key}-{os.getpid()}")
        remove_tree(tmp)
        os.makedirs(os.path.join(tmp, "rootfs"))
        try:
            for tar in tars:  # a gzip layer or a plain tar: GNU tar tells them apart itself
                run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=security.capability",
                     "-C", os.path.join(tmp, "rootfs"), "-xpf", tar], timeout=900)  # fmt: skip
            if not os.path.isfile(os.path.join(tmp, "rootfs", "etc/os-release")):
                raise LabError(f"--image {image}: the image has no /etc/os-release")
            remove_tree(final)
            os.rename(tmp, final)
        except BaseException:
            remove_tree(tmp)
            raise
    return rootfs
