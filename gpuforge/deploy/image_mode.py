"""Image mode: what a node image gets of each operation, as data (``gpuforge image build``).

Every operation the deploys add (a ``Layer`` name, or a deploy-level name given to
``RunState.converges``) carries an :class:`ImageTag` in :data:`OPERATION_TAGS`:

* ``SHARED``: the image gets the operation's packages, accounts, directories, the files that are
  the same on every node of the group (:func:`shape`) and its services enabled but stopped; the
  layer's own steps (hooks: restarts, reconfigures, registrations) are left out.
* ``SHARED_HOOKS``: as ``SHARED`` and the layer's own steps too (builds: DKMS, pyxis).
* ``NODE``: nothing in the image: per node, secret, or acting on the running cluster (the
  accounting database, kubeadm, tokens, storage mounts, the Prometheus server).

Invariants: a file flagged ``secret`` or carrying credentials (``redact``) never enters the image;
a file enters only when its (path, digest) is in the group's common set (the same bytes on every
node of the group under the real spec); an operation without a tag is an error, never a guess.
Pure: no pyinfra (the deploy side's hook is ``RunState.image``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum

from gpuforge.deploy.converge import Layer, LayerFacts, Service, Step
from gpuforge.probes.image import IMAGE_RECORD, IMAGE_RECORD_READING, ImageRecord
from gpuforge.render import render_node
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.spec import Spec
from gpuforge.spec.model import SourceMode
from gpuforge.spec.nodes import Node, resolve_nodes

#: Where a baked image records what it was built from (``gpuforge.probes.image`` reads it).
IMAGE_RECORD_PATH = IMAGE_RECORD


class ImageTag(StrEnum):
    SHARED = "shared"
    SHARED_HOOKS = "shared+hooks"
    NODE = "node"


#: The image tag of every operation (layer names and the deploy-level names of ``converges``).
OPERATION_TAGS: dict[str, ImageTag] = {
    "base": ImageTag.SHARED,
    "packages": ImageTag.SHARED,
    "el-repos": ImageTag.SHARED_HOOKS,  # as nvidia-repos: EPEL's release package and key in the image
    "munge": ImageTag.SHARED,
    "acct": ImageTag.NODE,
    "slurm-repo": ImageTag.SHARED,
    "slurm-accounting": ImageTag.NODE,
    "slurm-accounting-sync": ImageTag.NODE,
    "slurm-config": ImageTag.SHARED,
    "slurm-controller": ImageTag.NODE,
    "slurm-compute": ImageTag.NODE,  # slurmd joins the cluster from apply, with the current config and key
    "nvidia": ImageTag.SHARED_HOOKS,
    "nvidia-repos": ImageTag.SHARED_HOOKS,
    "nvidia-driver": ImageTag.SHARED_HOOKS,
    "container-engine": ImageTag.SHARED_HOOKS,
    "nvidia-container-toolkit": ImageTag.SHARED,
    "enroot": ImageTag.SHARED_HOOKS,
    "pyxis": ImageTag.SHARED_HOOKS,
    "nvidia-mig": ImageTag.NODE,
    "nvidia-dcgm": ImageTag.SHARED,
    "kubernetes": ImageTag.SHARED,
    "kubernetes-control-plane": ImageTag.NODE,
    "kubernetes-join-token": ImageTag.NODE,
    "kubernetes-join": ImageTag.NODE,
    "kubernetes-addons": ImageTag.NODE,
    "kubernetes-maintenance": ImageTag.NODE,
    "node-exporter": ImageTag.SHARED,
    "collectors": ImageTag.SHARED,
    "prometheus": ImageTag.NODE,
    "alertmanager": ImageTag.NODE,
    "storage-server": ImageTag.NODE,
    "storage-mounts": ImageTag.NODE,
    "health": ImageTag.SHARED,
    "fabric-sources": ImageTag.SHARED,
    "fabric": ImageTag.SHARED,
    "fabric-gdrcopy": ImageTag.SHARED_HOOKS,
    "fabric-nccl-tests": ImageTag.SHARED_HOOKS,
    "fabric-sharp-plugin": ImageTag.SHARED_HOOKS,
    "fabric-devices": ImageTag.NODE,
}

FileKey = tuple[str, str]
"""(path, sha256) of a rendered file."""


class UntaggedOperation(KeyError):
    """An operation :data:`OPERATION_TAGS` does not list: tag it before images can be built."""


def tag_of(name: str) -> ImageTag:
    try:
        return OPERATION_TAGS[name]
    except KeyError:
        raise UntaggedOperation(f"operation {name!r} has no image tag (gpuforge.deploy.image_mode)") from None


def image_file(f: RenderedFile, common: frozenset[FileKey]) -> bool:
    """Whether ``f`` enters the image: not secret, no credentials, the same on every node of the group."""
    return not f.secret and f.redact is None and (f.path, f.sha256) in common


def shape(layer: Layer, common: frozenset[FileKey]) -> Layer:
    """What the image gets of ``layer`` (see the module's invariants)."""
    if layer.is_empty:
        return layer
    tag = tag_of(layer.name)
    if tag is ImageTag.NODE:
        return Layer.empty(layer.name)
    hooks = tag is ImageTag.SHARED_HOOKS
    left_out = {f.path for f in layer.all_files if not image_file(f, common)}
    return Layer(
        layer.name,
        packages=layer.packages,
        early_files=[f for f in layer.early_files if image_file(f, common)],
        accounts=layer.accounts,
        directories=layer.directories,
        files=[f for f in layer.files if image_file(f, common)],
        services=tuple(
            Service(s.unit, enabled=s.enabled, running=False) for s in layer.services if not _unit_left_out(s, left_out)
        ),
        read_paths=layer.read_paths if hooks else (),
        before_files=layer.before_files if hooks else None,
        before_services=layer.before_services if hooks else None,
        after=layer.after if hooks else None,
        watch_packages=layer.watch_packages if hooks else (),
        rpm=layer.rpm,
        hold_pins=layer.hold_pins,
    )


def _unit_left_out(service: Service, left_out: set[str]) -> bool:
    """The layer writes the service's unit file and the image leaves it out: the node enables it."""
    name = service.unit if "." in service.unit else f"{service.unit}.service"
    return any(p.startswith("/etc/systemd/system/") and p.rsplit("/", 1)[-1] == name for p in left_out)


def layer_digest(layer: Layer) -> str:
    """SHA-256 of what an image holds of a shaped layer: packages, accounts, directories, files
    (path, digest, mode, owner) and enabled units; the same layer gives the same digest."""
    doc = {
        "packages": sorted(layer.packages),
        "accounts": sorted([a.name, a.uid, a.gid, a.home, a.shell] for a in layer.accounts),
        "directories": sorted([d.path, d.mode, d.owner, d.group] for d in layer.directories),
        "files": sorted([f.path, f.sha256, f.mode, f.owner, f.group] for f in layer.all_files),
        "services": sorted([s.unit, s.enabled] for s in layer.services),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@dataclass(eq=False)
class ImageBuild:
    """The hook of an image build: every layer shaped for the image, its digest recorded."""

    common: frozenset[FileKey]
    digests: dict[str, str] = field(default_factory=dict)
    kept: set[str] = field(default_factory=set)
    """Paths of the files the image's layers write (the strip keeps them as written)."""

    def converges(self, name: str) -> bool:
        return tag_of(name) is not ImageTag.NODE

    def layer(self, host: str, layer: Layer) -> Layer:
        shaped = shape(layer, self.common)
        if not shaped.is_empty:
            self.digests[layer.name] = layer_digest(shaped)
            self.kept |= {f.path for f in shaped.all_files}
        return shaped


@dataclass(eq=False)
class ImageCompare:
    """The hook of a plan: layers run unchanged; each host's layers are kept, and its image record
    is read in the base layer's one round trip; :meth:`statuses` compares them after the run."""

    layers: dict[str, list[Layer]] = field(default_factory=dict)
    records: dict[str, str | None] = field(default_factory=dict)

    def converges(self, name: str) -> bool:
        return True

    def layer(self, host: str, layer: Layer) -> Layer:
        if layer.is_empty:
            return layer
        self.layers.setdefault(host, []).append(layer)
        if layer.name != "base":
            return layer
        return replace(layer, read_paths=(*layer.read_paths, IMAGE_RECORD_PATH), after=self._reader(host, layer))

    def _reader(self, host: str, layer: Layer) -> Callable[[LayerFacts, set[str]], list[Step]]:
        inner = layer.after

        def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
            self.records[host] = facts.contents.get(IMAGE_RECORD_PATH)
            return inner(facts, changed) if inner is not None else []

        return after

    def statuses(self, spec: Spec) -> dict[str, ImageStatus]:
        """Per host whose record was read: how its image compares with the spec (one render of
        each group that has such a host)."""
        nodes = {n.name: n for n in resolve_nodes(spec)}
        out: dict[str, ImageStatus] = {}
        common: dict[str, frozenset[FileKey]] = {}
        for host, text in sorted(self.records.items()):
            record = IMAGE_RECORD_READING.parse((text or "").splitlines())
            node = nodes.get(host)
            if node is None:
                continue
            if record.present and node.group not in common:
                common[node.group] = common_files(spec, [n for n in nodes.values() if n.group == node.group])
            want = {
                layer.name: layer_digest(shaped)
                for layer in self.layers.get(host, [])
                if not (shaped := shape(layer, common.get(node.group, frozenset()))).is_empty
            }
            out[host] = compare(record, node.group, want)
        return out


def node_files(spec: Spec, node: Node) -> frozenset[FileKey]:
    return frozenset((f.path, f.sha256) for f in render_node(spec, node, Secrets.redacted()) if not f.secret)


#: The package proxy an image build's container uses instead of the spec's (its own mirror): a
#: file that renders it (the apt proxy) is never in an image, so never in the common set either.
BUILD_PROXY = "http://gpuforge-image-build.invalid:3142"


def build_variant(spec: Spec) -> Spec:
    """``spec`` as far as the image build changes it: packages through another proxy."""
    sources = spec.sources.model_copy(update={"apt_proxy": BUILD_PROXY, "mode": SourceMode.MIRROR})
    return spec.model_copy(update={"sources": sources})


def common_files(spec: Spec, nodes: list[Node]) -> frozenset[FileKey]:
    """(path, sha256) of every non-secret file that is the same on all ``nodes`` (secrets redacted)
    and does not depend on where the build gets packages from (:func:`build_variant`); the build
    and a plan's comparison both use this set, so they agree on what an image holds."""
    if not nodes:
        return frozenset()
    sets = [node_files(spec, n) for n in nodes] + [node_files(build_variant(spec), nodes[0])]
    return frozenset.intersection(*sets)


@dataclass(frozen=True)
class ImageStatus:
    """How a node's image record compares with what the spec would put in its group's image."""

    record: ImageRecord
    group: str
    differs: tuple[str, ...] = ()

    @property
    def matches(self) -> bool:
        return self.record.present and self.record.group == self.group and not self.differs

    def line(self) -> str:
        """``image matches spec ...`` or what differs (plan output)."""
        r = self.record
        if r.problem:
            return f"image record unreadable ({r.problem}): apply converges the node as any other"
        if not r.present:
            return "not booted from a gpuforge image"
        if r.group != self.group:
            return f"image of group {r.group}, node is in {self.group}: apply converges the difference"
        if not self.differs:
            return f"image matches spec (group {r.group}, built {r.built})"
        return f"image differs from spec in {', '.join(self.differs)} (built {r.built}): apply converges them"


def compare(record: ImageRecord, group: str, want: dict[str, str]) -> ImageStatus:
    """Layers whose digest in the spec (``want``) is not the image's, and layers the image has that
    the spec no longer puts in it."""
    differs = sorted({k for k, v in want.items() if record.layers.get(k) != v} | (set(record.layers) - set(want)))
    return ImageStatus(record, group, tuple(differs))
