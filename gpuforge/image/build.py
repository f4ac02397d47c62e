"""``gpuforge image build``: bake a node group's image from the spec.

Steps: a throwaway lab of one container (its own name and subnet, the lab's Debian base) boots;
the site deploy runs on it in image mode as the group's first node (``gpuforge.deploy.image_run``);
the container stops; the tree is stripped (``strip``), gets ``/etc/gpuforge/image.json``, is
checked for any secret or identity left (the build fails if one is); the outputs are written.
Invariants: the build lab is always torn down (also on failure or Ctrl-C); outputs are written
only after the check passed.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpuforge.deploy.image_mode import IMAGE_RECORD_PATH, ImageBuild
from gpuforge.deploy.image_run import run_image_build
from gpuforge.deploy.secrets import SecretStore
from gpuforge.image import bootable, oci, qcow2, strip, tarball
from gpuforge.image.manifest import image_manifest, write_json
from gpuforge.image.record import image_record, record_text
from gpuforge.image.safe_files import private_temp, write_in_tree
from gpuforge.image.scope import ImageSpecError, build_spec_data, common_files, group_nodes
from gpuforge.lab import core
from gpuforge.lab.lab_record import STATE_ROOT, LabPaths, LabState
from gpuforge.lab.node import stop
from gpuforge.lab.plan import DEFAULT_OS
from gpuforge.render.health import node_health_key
from gpuforge.spec import Spec
from gpuforge.spec.cluster import Cluster, load_cluster
from gpuforge.spec.nodes import Node

#: The build labs, one per image build running at once on this host (name, subnet): a build takes the
#: first one free and holds its lock until its lab is down; when every one is in use, it is refused.
BUILD_LABS = (("gfimg", "10.213.21.0/24"), ("gfimg2", "10.213.25.0/24"), ("gfimg3", "10.213.26.0/24"))
FORMATS = ("rootfs", "oci", "qcow2", "vagrant")
Log = Callable[[str], None]


class ImageBuildError(RuntimeError):
    """The build failed (the deploy, or the check of what the image must not carry)."""


@dataclass
class BuildResult:
    out: Path
    outputs: dict[str, Path] = field(default_factory=dict)
    record: dict[str, object] = field(default_factory=dict)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def parse_formats(text: str) -> tuple[str, ...]:
    """``rootfs,oci,qcow2,vagrant`` -> the formats, in the fixed order (:class:`ImageSpecError` naming ``--format``)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in FORMATS]
    if bad or not names:
        raise ImageSpecError("--format", f"{', '.join(bad) or 'nothing'}: choose from {', '.join(FORMATS)}")
    return tuple(f for f in FORMATS if f in names)


def secret_values(spec: Spec, nodes: Sequence[Node] = ()) -> list[bytes]:
    """Every secret of the cluster, as bytes (what the image must not hold anywhere), with the
    health HMAC keys of ``nodes`` (the node the build runs as)."""
    store = SecretStore(spec.cluster.name)
    sec = store.load()
    values = [sec.munge_key, sec.slurmdbd_db_password.encode()]
    if sec.health_key is not None:
        values += [sec.health_key, *(node_health_key(sec.health_key, n.name).strip() for n in nodes)]
    if spec.kubernetes is not None:
        values += list(store.kubernetes_pki().values())
    return values


@contextlib.contextmanager
def free_build_lab(labs: Sequence[tuple[str, str]] = BUILD_LABS, root: str = STATE_ROOT) -> Iterator[tuple[str, str]]:
    """The first build lab no other build holds (its ``flock`` held for the block): two builds at once
    never tear down each other's lab. :class:`ImageBuildError` when every one is in use."""
    os.makedirs(root, exist_ok=True)
    for name, subnet in labs:
        with open(os.path.join(root, f".{name}.build.lock"), "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            yield name, subnet
            return
    names = ", ".join(name for name, _ in labs)
    raise ImageBuildError(f"{len(labs)} image builds run on this host already (build labs {names}): wait for one")


@contextlib.contextmanager
def build_lab(name: str, subnet: str, log: Log, release: str = DEFAULT_OS) -> Iterator[LabState]:
    """A one-container lab of ``release`` (the image's base OS), torn down whatever happens (the caller
    holds its build lock)."""
    core.down(name, log=lambda m: None)
    try:
        yield core.up(name, 1, subnet, log=log, releases=(release, {}))
    finally:
        core.down(name, log=lambda m: None)


@contextlib.contextmanager
def build_spec_file(cluster: Cluster, lab: LabState) -> Iterator[Path]:
    """The spec as the build runs it, beside the spec (its relative paths still hold) in a file only this
    build created (``mkstemp``: no name to plant a link at beforehand); removed after."""
    if cluster.text is None:
        raise ValueError("the image build needs the spec file's text: load it with load_cluster")
    data = yaml.safe_load(cluster.text)
    fitted = build_spec_data(data, lab.ssh_key, lab.known_hosts, lab.mirror_url)
    path = Path(private_temp(str(cluster.folder), ".gpuforge-image-build-", ".yaml"))  # O_EXCL, 0600
    try:
        path.write_text(yaml.safe_dump(fitted, sort_keys=False))
        yield path
    finally:
        path.unlink(missing_ok=True)


def build_image(cluster: Cluster, group: str, out: Path, formats: tuple[str, ...], log: Log) -> BuildResult:
    """Bake ``group``'s image of the ``cluster``'s spec into ``out`` (see the module)."""
    spec = cluster.spec
    nodes = group_nodes(spec, group)
    secrets = secret_values(spec, nodes[:1])
    hook = ImageBuild(common_files(spec, nodes))
    t0 = time.monotonic()
    result = BuildResult(out)
    base_os = nodes[0].os.value  # a group's nodes share its os
    with free_build_lab() as (lab_name, subnet), build_lab(lab_name, subnet, log, base_os) as lab, \
            build_spec_file(cluster, lab) as fitted:  # fmt: skip
        built_as = load_cluster(fitted)  # its nodes are reached as the build container is (``build_spec_data``)
        node = group_nodes(built_as.spec, group)[0]
        applied = run_image_build(built_as, node, lab.nodes[0].address, hook, log)
        host = applied.hosts[nodes[0].name]
        if not host.ok:
            raise ImageBuildError(f"the deploy failed on the build container: {host.error}")
        log(f"image converged: {len(host.changed)} operation(s) changed, {host.unchanged} unchanged")
        if bootable.needs_kernel(formats):
            bootable.install_kernel(lab, log)
        stop(lab_name)
        tree = LabPaths(lab_name).node_rootfs(lab.nodes[0].name)
        built = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        result.record = image_record(spec, group, hook.digests, base_os, built)
        if bootable.needs_kernel(formats):
            result.record["kernel"] = bootable.kernel_release(tree)
        finish_tree(tree, result.record, secrets, hook.kept, log)
        write_outputs(tree, out, formats, result, log)
        write_json(out / "image-manifest.json", image_manifest(tree, result.record, hook.common))
    result.seconds = time.monotonic() - t0
    return result


def finish_tree(tree: str, record: dict[str, object], secrets: list[bytes], kept: set[str], log: Log) -> None:
    """Strip, write the image record, then check: raise when anything the image must not carry is left."""
    removed = strip.strip_tree(tree, kept)
    log(f"stripped {len(removed)} path(s) of identity and run state")
    write_in_tree(tree, IMAGE_RECORD_PATH, record_text(record).encode(), 0o644)
    found = strip.findings(tree, secrets)
    if found:
        raise ImageBuildError("the image still holds: " + "; ".join(str(f) for f in found[:10]))


def oci_labels(record: dict[str, object]) -> dict[str, str]:
    """The record as OCI labels (strings): spec hash, group, gpuforge version, layer digests."""
    layers = record.get("layers")
    labels = {
        "org.opencontainers.image.created": str(record["built"]),
        "org.opencontainers.image.title": f"gpuforge {record['cluster']} {record['group']}",
        "io.gpuforge.spec-hash": str(record["spec_hash"]),
        "io.gpuforge.group": str(record["group"]),
        "io.gpuforge.base-os": str(record["base_os"]),
        "io.gpuforge.version": str(record["gpuforge_version"]),
    }
    if "kernel" in record:
        labels["io.gpuforge.kernel"] = str(record["kernel"])
    if isinstance(layers, dict):
        labels.update({f"io.gpuforge.layer.{k}": str(v) for k, v in sorted(layers.items())})
    return labels


def write_outputs(tree: str, out: Path, formats: tuple[str, ...], result: BuildResult, log: Log) -> None:
    """rootfs tarball (always made: the OCI layer is it), OCI layout and archive, qcow2 (with the kernel
    and initrd beside it), Vagrant box (made from a copy of the tree, last)."""
    out.mkdir(parents=True, exist_ok=True)
    tar = out / "rootfs.tar"
    tarball.write_tarball(tree, str(tar))
    if "rootfs" in formats:
        result.outputs["rootfs"] = tar
    if "oci" in formats:
        layout = out / "oci"
        shutil.rmtree(layout, ignore_errors=True)
        ref = f"{result.record['cluster']}-{result.record['group']}"
        oci.write_layout(str(layout), str(tar), oci_labels(result.record), str(result.record["built"]), ref)
        oci.archive_layout(str(layout), str(out / oci.ARCHIVE))
        result.outputs["oci"], result.outputs["oci-archive"] = layout, out / oci.ARCHIVE
    if "qcow2" in formats:
        missing = qcow2.missing_tools()
        if missing:
            result.notes.append(f"qcow2 not made: {', '.join(missing)} missing (apt-get install qemu-utils e2fsprogs)")
        else:
            result.outputs["qcow2"] = qcow2.write_qcow2(tree, out / "disk.qcow2")
            result.outputs["kernel"], result.outputs["initrd"] = bootable.write_boot_files(tree, out)
    if "vagrant" in formats:
        name = bootable.box_name(str(result.record["cluster"]), str(result.record["group"]))
        box = bootable.write_vagrant_box(tree, out, name, log, str(result.record["base_os"]))
        result.outputs["vagrant"] = Path(box.box_file)
        closed = bootable.closed_folder(out / "vagrant")
        if closed is not None:
            result.notes.append(
                f"the box boots vmlinuz and initrd from {out / 'vagrant'}, but other users cannot enter {closed}: "
                f"libvirt's qemu user will not read them (chmod o+x {closed})"
            )
    if "rootfs" not in formats:
        tar.unlink()
    for name, path in result.outputs.items():
        log(f"{name}: {path}")


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
