"""What the NVIDIA, fabric and Kubernetes deploys install on a spec's nodes, with the URLs to fetch it from."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuforge.bundle.fabric_downloads import fabric_needs
from gpuforge.bundle.layout import RPM_RELEASEVER
from gpuforge.bundle.resolve import Pin, Want
from gpuforge.deploy import nvidia_needs
from gpuforge.render import nvidia_sources as src
from gpuforge.render.k8s_artifacts import addon_artifacts
from gpuforge.render.k8s_packages import K8S_REPO, kubernetes_repo
from gpuforge.render.kubeadm import first_control_plane
from gpuforge.render.nvidia import host_dcgm_exporter, host_driver
from gpuforge.render.nvidia_repos import (
    docker_repo_wanted,
    driver_source,
    enroot_wanted,
    epel_wanted,
    pyxis_wanted,
)
from gpuforge.spec import Spec, k8s_upstream, resolve_nodes
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec.model import DriverSource, SourceMode
from gpuforge.spec.nodes import Node
from gpuforge.spec.platforms import Platform
from gpuforge.spec.repo_keys import repository_fingerprint
from gpuforge.spec.roles import deploys_for


@dataclass
class RepoNeed:
    """Packages the nodes install from one repository URL."""

    kind: str
    fmt: str  # apt | rpm
    url: str | None
    reason: str | None
    distro: str
    platform: Platform  # the nodes' platform: the architecture of the packages fetched
    wants: dict[str, Want] = field(default_factory=dict)
    pins: list[Pin] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    key_url: str | None = None  # the key that signs its InRelease (apt), its metadata or packages (rpm)
    fingerprint: str | None = None  # the primary key fingerprint its key must have (gpuforge.spec.repo_keys)
    module_streams: set[tuple[str, str]] = field(default_factory=set)  # rpm: (module, stream) the nodes enable

    @property
    def path(self) -> str:
        return f"{self.fmt}/{self.kind}"


@dataclass
class ArtifactNeed:
    """A release file and the nodes that install it."""

    artifact: src.Artifact
    nodes: list[str] = field(default_factory=list)


@dataclass
class Needs:
    repos: dict[tuple[str, str, str | None], RepoNeed] = field(default_factory=dict)
    artifacts: dict[str, ArtifactNeed] = field(default_factory=dict)


def fetch_spec(spec: Spec) -> Spec:
    """The spec as the bundle fetches it: mirror mode as written, anything else from upstream."""
    if spec.sources.mode is SourceMode.MIRROR:
        return spec
    return spec.model_copy(update={"sources": spec.sources.model_copy(update={"mode": SourceMode.UPSTREAM})})


def _node_wants(ctx: nvidia_needs.Ctx) -> tuple[list[Want], list[Want], list[Pin], set[tuple[str, str]]]:
    """(CUDA repository wants, container repository wants, apt pins, dnf module streams) of one node."""
    s, n = ctx.spec, ctx.node
    cuda: list[Want] = []
    container: list[Want] = []
    pins: list[Pin] = []
    streams: set[tuple[str, str]] = set()
    ver = ctx.driver_version
    if ctx.gpu_node and host_driver(s):
        pins.append(Pin(tuple(src.DRIVER_PIN_PACKAGES.split()), (f"{ver}-*",)))
    if nvidia_needs.dcgm_wanted(ctx):
        pins.append(Pin(("datacenter-gpu-manager-4-*",), (f"1:{s.versions.dcgm}-*", f"{s.versions.dcgm}-*")))
        if host_dcgm_exporter(s):
            ev = table.dcgm_exporter_package_version(s.versions.dcgm_exporter)
            pins.append(Pin((table.DCGM_EXPORTER_PACKAGE,), (f"{ev}-*",)))
    if nvidia_needs.cuda_repo_wanted(ctx):
        if host_driver(s):
            if driver_source(s, n) is DriverSource.NVIDIA:
                row = nvidia_needs.driver_install(ctx)
                if row.dnf_stream:
                    streams.add(("nvidia-driver", row.dnf_stream))
                why = f"driver {ver}" if ctx.deb else f"driver {ver} (dnf module nvidia-driver:{row.dnf_stream})"
                # NVIDIA's pinning packages carry the branch, not the driver's version
                cuda += [
                    Want(p, () if p == row.pinning_package else (f"{ver}-*",), why)
                    for p in nvidia_needs.driver_repo_packages(ctx)
                ]
            if n.hardware.nvswitch and nvidia_needs.fabric_manager_from_cuda_repo(ctx):
                cuda += [
                    Want(p, (f"{ver}-*",), "NVSwitch fabric manager") for p in nvidia_needs.fabric_manager_packages(ctx)
                ]
            tk = nvidia_needs.cuda_toolkit_package(ctx)
            if tk:
                cuda.append(Want(tk, (), f"CUDA toolkit {s.versions.cuda_toolkit}"))
        if nvidia_needs.dcgm_wanted(ctx):
            dv = s.versions.dcgm
            cuda += [Want(p, (f"1:{dv}-*", f"{dv}-*"), f"DCGM {dv}") for p in nvidia_needs.dcgm_packages(ctx)]
            if host_dcgm_exporter(s):
                ev = table.dcgm_exporter_package_version(s.versions.dcgm_exporter)
                cuda.append(
                    Want(table.DCGM_EXPORTER_PACKAGE, (f"{ev}-*",), f"dcgm-exporter {s.versions.dcgm_exporter}")
                )
    if nvidia_needs.toolkit_wanted(ctx):
        tv = s.versions.container_toolkit
        container += [Want(p, (f"{tv}-1",), f"container toolkit {tv}") for p in nvidia_needs.TOOLKIT_PACKAGES]
    return cuda, container, pins, streams


def _docker_wants(ctx: nvidia_needs.Ctx) -> list[Want]:
    """RHEL nodes running containerd or docker: the engine from Docker's RHEL repository."""
    if not docker_repo_wanted(ctx.spec, ctx.node):
        return []
    engine = ctx.spec.container_runtime.engine.value
    return [Want(table.ENGINE_PACKAGES[(engine, False)], (), f"container engine {engine}")]


def _epel_wants(ctx: nvidia_needs.Ctx) -> list[Want]:
    """RHEL nodes: what they install from EPEL 9 (nvidia_repos.epel_wanted): dkms for the
    driver's DKMS streams, enroot's ``parallel``, ``slurm-devel`` for the pyxis build."""
    s, n = ctx.spec, ctx.node
    if not epel_wanted(s, n):
        return []
    wants: list[Want] = []
    if ctx.gpu_node and host_driver(s) and driver_source(s, n) is DriverSource.NVIDIA:
        row = nvidia_needs.driver_install(ctx)
        if row.needs_epel:
            wants += [Want(p, (), "the driver's DKMS") for p in row.prerequisites if p == "dkms"]
    if enroot_wanted(s, n):
        wants.append(Want("parallel", (), "enroot"))
    if pyxis_wanted(s, n):
        wants.append(Want("slurm-devel", (), "the pyxis build"))
    return wants


def _k8s_wants(ctx: nvidia_needs.Ctx) -> list[Want]:
    """Kubernetes nodes: kubelet, kubeadm and kubectl at the spec's version (their dependencies,
    cri-tools and kubernetes-cni, come from the same repository)."""
    s, n = ctx.spec, ctx.node
    if s.kubernetes is None or "kubernetes" not in deploys_for(n):
        return []
    v = s.versions.kubernetes
    return [Want(p, (k8s_upstream.deb_version_glob(v),), f"Kubernetes {v}") for p in k8s_upstream.PACKAGES]


def _node_artifacts(ctx: nvidia_needs.Ctx) -> list[src.Artifact]:
    s, n = ctx.spec, ctx.node
    arts: list[src.Artifact] = []
    if enroot_wanted(s, n):
        arts += src.enroot_artifacts(s, n.platform)
    if pyxis_wanted(s, n):
        arts.append(src.pyxis_artifact(s))
    if ctx.gpu_node and n.mig_config:
        arts.append(src.mig_manager_artifact(s, n.platform))
    first = first_control_plane(s) if s.kubernetes is not None else None
    if first is not None and first.name == n.name:
        arts += addon_artifacts(s)
    return arts


def _k8s_pins(s: Spec) -> list[Pin]:
    """The apt pin the nodes get (render.k8s_packages.apt_pin): the packages at the spec's patch."""
    return [Pin(k8s_upstream.PACKAGES, (k8s_upstream.deb_version_glob(s.versions.kubernetes),))]


def _fetch_url(url: str, platform: Platform) -> str:
    """A repository URL as the bundle fetches it: the architecture and release the nodes would substitute."""
    names = platform.names
    for var, value in (("$(ARCH)", names.deb), ("$basearch", names.rpm), ("$releasever", RPM_RELEASEVER)):
        url = url.replace(var, value)
    return url


def _repo_need(needs: Needs, s: Spec, n: Node, repo: src.Repo, fingerprint: str | None = None) -> RepoNeed:
    """The need for ``repo`` as ``n`` uses it (one per format, kind and URL), made on first use.
    ``fingerprint``: the key the spec pins for it where the tables know none (DOCA's)."""
    fmt = "apt" if n.os.is_deb else "rpm"
    url = _fetch_url(repo.url, n.platform) if repo.url else None
    key = (fmt, repo.kind, url)
    need = needs.repos.get(key)
    if need is None:
        need = RepoNeed(repo.kind, fmt, url, repo.reason, n.os.distribution.cuda_repo_distro, n.platform)
        if fmt == "apt":
            need.key_url = src.apt_release_key(s, repo)[0]
        else:
            need.key_url = src.rpm_repo_key(s, repo)[0]
        need.fingerprint = fingerprint or repository_fingerprint(s, repo.kind, fmt == "apt")
        needs.repos[key] = need
    return need


def _add(need: RepoNeed, node: str, wants: list[Want], pins: list[Pin]) -> None:
    for w in wants:
        need.wants.setdefault(w.package, w)
    for p in pins:
        if p not in need.pins:
            need.pins.append(p)
    if node not in need.nodes:
        need.nodes.append(node)


def _nvidia_needs(needs: Needs, s: Spec, n: Node) -> None:
    """What the NVIDIA deploy installs on ``n``."""
    ctx = nvidia_needs.Ctx(s, n, name=n.name)
    cuda_w, container_w, pins, streams = _node_wants(ctx)
    docker_w = _docker_wants(ctx)
    epel_w = _epel_wants(ctx)
    k8s_w = _k8s_wants(ctx)
    for want_list, repo in (
        (cuda_w, src.cuda_repo(s, n.platform) if cuda_w else None),
        (container_w, src.container_repo(s, n.os) if container_w else None),
        (docker_w, src.docker_repo(s, n.os) if docker_w else None),
        (epel_w, src.epel_fetch_repo(s) if epel_w else None),
        (k8s_w, kubernetes_repo(s, n.os) if k8s_w else None),
    ):
        if repo is None:
            continue
        need = _repo_need(needs, s, n, repo)
        if repo.kind == src.CUDA_REPO:
            need.module_streams |= streams
        _add(need, n.name, want_list, [*pins, *(_k8s_pins(s) if repo.kind == K8S_REPO else [])])
    for a in _node_artifacts(ctx):
        needs.artifacts.setdefault(a.name, ArtifactNeed(a)).nodes.append(n.name)


def _fabric_needs(needs: Needs, s: Spec, n: Node) -> None:
    """What the fabric layers install on ``n`` (gpuforge.bundle.fabric_downloads)."""
    fab = fabric_needs(s, n)
    if fab.doca_repo is not None:
        _add(_repo_need(needs, s, n, fab.doca_repo, fab.doca_fingerprint), n.name, fab.doca_wants, [])
    if fab.nccl_wants:
        _add(_repo_need(needs, s, n, src.cuda_repo(s, n.platform)), n.name, fab.nccl_wants, fab.nccl_pins)
    for a in fab.artifacts:
        nodes = needs.artifacts.setdefault(a.name, ArtifactNeed(a)).nodes
        if n.name not in nodes:
            nodes.append(n.name)


def spec_needs(spec: Spec, nodes: list[Node] | None = None) -> Needs:
    """What the NVIDIA and fabric deploys install on the spec's nodes, with the URLs to fetch it from."""
    s = fetch_spec(spec)
    needs = Needs()
    for n in nodes if nodes is not None else resolve_nodes(s):
        deploys = deploys_for(n)
        if "nvidia" in deploys:
            _nvidia_needs(needs, s, n)
        if "fabric" in deploys:
            _fabric_needs(needs, s, n)
    return needs
