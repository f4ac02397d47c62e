"""An OCI image layout (directory, and the same as one tar archive) of a root filesystem tarball.

Stdlib only. One gzip layer (the rootfs tar), a config whose ``rootfs.diff_ids`` is the digest of
the uncompressed tar, a manifest, ``index.json`` and ``oci-layout`` (:data:`SOURCES`). Labels on the
config and annotations on the manifest carry the image record (spec hash, group, gpuforge version,
layer digests). Invariants: every blob is stored under ``blobs/sha256/<its sha256>`` and every
descriptor's size and digest are those of the blob it names (:func:`verify_layout` checks them all);
the gzip stream has no timestamp or file name, so the same tar gives the same layer digest.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from typing import Any

from gpuforge.image.safe_files import private_temp, replacing, write_file
from gpuforge.spec.citation import Citation

SPEC = "https://github.com/opencontainers/image-spec/blob/main"
SOURCES: dict[str, Citation] = {
    "layout": Citation(
        "OCI Image Layout Specification", f"{SPEC}/image-layout.md",
        "Content: blobs/, oci-layout with imageLayoutVersion, index.json (an image index)",
    ),
    "media-types": Citation(
        "OCI Image Media Types", f"{SPEC}/media-types.md",
        "application/vnd.oci.image.{index,manifest,config}.v1+json, layer.v1.tar+gzip",
    ),
    "manifest": Citation("OCI Image Manifest Specification", f"{SPEC}/manifest.md", "schemaVersion 2; config, layers"),
    "warewulf-import": Citation(
        "Warewulf OS Images",
        "https://github.com/warewulf/warewulf/blob/3b122fb99508d6013a18e1eda6b0421c813ac74b/userdocs/images/images.rst",
        "Importing Images: Local OCI Archive (`wwctl image import rockylinux-8.tar rockylinux-8`), Local Directories",
    ),
}  # fmt: skip
LAYOUT_VERSION = "1.0.0"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"
#: The OCI archive's name in a build's output folder (``gpuforge image build -o DIR``).
ARCHIVE = "image.oci.tar"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int

    def descriptor(self, media_type: str, **extra: Any) -> dict[str, Any]:
        return {"mediaType": media_type, "digest": self.digest, "size": self.size, **extra}


def _put(layout: str, data: bytes) -> Blob:
    digest = hashlib.sha256(data).hexdigest()
    write_file(os.path.join(layout, "blobs", "sha256", digest), data)
    return Blob(f"sha256:{digest}", len(data))


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _gzip_layer(layout: str, tar_path: str) -> tuple[Blob, str]:
    """The gzip of ``tar_path`` as a blob (streamed), and the uncompressed tar's digest (diff_id)."""
    tmp = private_temp(os.path.join(layout, "blobs", "sha256"), ".layer.", ".partial")
    raw, packed = hashlib.sha256(), hashlib.sha256()
    with (
        open(tar_path, "rb") as src,
        open(tmp, "wb") as out,
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz,
    ):
        for block in iter(lambda: src.read(CHUNK), b""):
            raw.update(block)
            gz.write(block)
    with open(tmp, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            packed.update(block)
    digest = packed.hexdigest()
    os.replace(tmp, os.path.join(layout, "blobs", "sha256", digest))
    return Blob(f"sha256:{digest}", os.path.getsize(os.path.join(layout, "blobs", "sha256", digest))), (
        f"sha256:{raw.hexdigest()}"
    )


def write_layout(
    layout: str, tar_path: str, labels: dict[str, str], created: str, ref: str, arch: str = "amd64"
) -> str:
    """Write the OCI image layout of ``tar_path`` into the (new) folder ``layout``; return the
    manifest digest. ``labels``: config labels and manifest annotations (strings)."""
    os.makedirs(os.path.join(layout, "blobs", "sha256"))
    layer, diff_id = _gzip_layer(layout, tar_path)
    config = {
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": {"Labels": labels, "Cmd": ["/sbin/init"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "gpuforge image build"}],
    }
    config_blob = _put(layout, _json(config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": config_blob.descriptor(CONFIG_MEDIA_TYPE),
        "layers": [layer.descriptor(LAYER_MEDIA_TYPE)],
        "annotations": labels,
    }
    manifest_blob = _put(layout, _json(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [manifest_blob.descriptor(MANIFEST_MEDIA_TYPE, annotations={REF_NAME: ref})],
    }
    write_file(os.path.join(layout, "index.json"), _json(index))
    write_file(os.path.join(layout, "oci-layout"), _json({"imageLayoutVersion": LAYOUT_VERSION}))
    return manifest_blob.digest


def archive_layout(layout: str, out: str) -> None:
    """The layout as one tar (an OCI archive, what ``wwctl image import FILE`` takes), sorted,
    numeric owners 0."""
    with replacing(out) as tmp, tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for folder, dirs, files in os.walk(layout):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(folder, name)
                info = tar.gettarinfo(path, os.path.relpath(path, layout))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(path, "rb") as f:
                    tar.addfile(info, f)


class LayoutError(ValueError):
    """An OCI layout whose descriptors do not match its blobs."""


def _blob_path(layout: str, digest: str) -> str:
    algo, _, hexd = digest.partition(":")
    if algo != "sha256" or len(hexd) != 64:
        raise LayoutError(f"unsupported digest {digest!r}")
    return os.path.join(layout, "blobs", "sha256", hexd)


def _check(layout: str, desc: dict[str, Any]) -> str:
    path = _blob_path(layout, desc["digest"])
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    if f"sha256:{h.hexdigest()}" != desc["digest"]:
        raise LayoutError(f"blob {desc['digest']} has digest sha256:{h.hexdigest()}")
    if os.path.getsize(path) != desc["size"]:
        raise LayoutError(f"blob {desc['digest']} is {os.path.getsize(path)} bytes, its descriptor says {desc['size']}")
    return path


def read_manifest(layout: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(manifest, config) of the layout's single image, every digest checked on the way."""
    with open(os.path.join(layout, "oci-layout")) as f:
        if json.load(f).get("imageLayoutVersion") != LAYOUT_VERSION:
            raise LayoutError("oci-layout: imageLayoutVersion is not " + LAYOUT_VERSION)
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    manifests = index.get("manifests") or []
    if len(manifests) != 1:
        raise LayoutError(f"index.json lists {len(manifests)} manifests, gpuforge reads layouts of one image")
    with open(_check(layout, manifests[0])) as f:
        manifest = json.load(f)
    with open(_check(layout, manifest["config"])) as f:
        config = json.load(f)
    return manifest, config


def verify_layout(layout: str) -> list[str]:
    """Check every descriptor against its blob, and each layer's diff_id against its uncompressed
    content; return the layer blob paths (raises :class:`LayoutError`)."""
    manifest, config = read_manifest(layout)
    layers = [_check(layout, d) for d in manifest["layers"]]
    diff_ids = config["rootfs"]["diff_ids"]
    if len(diff_ids) != len(layers):
        raise LayoutError("config lists another number of diff_ids than the manifest has layers")
    for path, want in zip(layers, diff_ids, strict=True):
        h = hashlib.sha256()
        with gzip.open(path, "rb") as f:
            for block in iter(lambda: f.read(CHUNK), b""):
                h.update(block)
        if f"sha256:{h.hexdigest()}" != want:
            raise LayoutError(f"layer {path}: uncompressed digest sha256:{h.hexdigest()}, diff_id {want}")
    return layers


def copy_layout(src: str, dest: str) -> None:
    shutil.copytree(src, dest)
