"""Layer 1, nvidia-repos: apt/dnf sources and version pins; ``apt-get update`` when they change."""

from __future__ import annotations

from gpuforge.deploy.converge import Layer, LayerFacts, Step, StepKind, refresh_step
from gpuforge.deploy.layers.nvidia.common import keep_reports, quote_path, unavailable_step, upload_file
from gpuforge.deploy.nvidia_needs import (
    Ctx,
    cuda_repo_wanted,
    toolkit_wanted,
)
from gpuforge.render import nvidia_sources as src
from gpuforge.render.files import RenderedFile
from gpuforge.render.key_check import key_check_command
from gpuforge.render.nvidia import (
    host_driver,
)
from gpuforge.render.nvidia_repos import docker_repo_wanted, driver_source, epel_wanted, nvidia_repo_files
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec.model import DriverSource
from gpuforge.spec.repo_keys import repository_fingerprint


def repos_layer(ctx: Ctx) -> Layer:
    """Sources and pins for the node's NVIDIA packages; ``apt-get update`` when they change."""
    epel = src.epel_repo(ctx.spec) if epel_wanted(ctx.spec, ctx.node) else None
    docker = src.docker_repo(ctx.spec, ctx.os) if docker_repo_wanted(ctx.spec, ctx.node) else None
    if not ctx.gpu_node and epel is None and docker is None:
        return Layer.empty("nvidia-repos")
    s = ctx.spec
    files: list[RenderedFile] = []
    read: list[str] = []
    distro = host_driver(s) and driver_source(s, ctx.node) is DriverSource.DISTRO
    cuda = src.cuda_repo(s, ctx.platform) if cuda_repo_wanted(ctx) else None
    container = src.container_repo(s, ctx.os) if toolkit_wanted(ctx) else None
    repos = [r for r in (cuda, container, epel, docker) if r is not None and r.available]
    for r in repos:
        if r.bundle is not None:
            files += [upload_file(f"{r.url}/{rel}", data) for rel, data in src.bundle_files(r.bundle)]
    bundle_key = src.bundle_key(s, ctx.deb)
    if bundle_key is not None and any(r.bundle is not None for r in repos):
        # what the bundle's InRelease (apt) or repomd.xml.asc (dnf's gpgkey=) is checked with
        key_path = src.BUNDLE_KEYRING if ctx.deb else f"{src.BUNDLE_ON_NODE}/{src.BUNDLE_RPM_KEY_FILE}"
        files.append(upload_file(key_path, bundle_key))
    files += nvidia_repo_files(s, ctx.node)
    if ctx.deb:
        if cuda is not None and cuda.available and cuda.bundle is None:
            read.append(src.CUDA_KEYRING)
        if container is not None and container.available and container.bundle is None:
            read.append(src.CONTAINER_KEYRING)
        if distro:
            read += [*src.NODE_APT_SOURCES, src.DEBIAN_NONFREE_SOURCES]
    rpm_keyed = (
        [] if ctx.deb else [r for r in repos if r.bundle is None and r.key_url and r.url != src.EPEL_RELEASE_RPM]
    )
    read += [src.rpm_key_path(r.kind) for r in rpm_keyed]
    repo_paths = {f.path for f in files}

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if distro and ctx.deb:
            node_sources = [facts.contents.get(p) or "" for p in src.NODE_APT_SOURCES]
            suite = ctx.node.os.distribution.codename or ""  # every debian-nonfree row names its suite
            want = src.debian_nonfree_sources(node_sources, suite, s.sources.mirrors.debian)
            have = facts.contents.get(src.DEBIAN_NONFREE_SOURCES)
            if want is not None and have != want:
                f = upload_file(src.DEBIAN_NONFREE_SOURCES, want.encode())
                steps.append(Step(StepKind.UPLOAD, f"write {f.path} (contrib non-free non-free-firmware)", upload=f))
                changed.add(f.path)
            elif want is None and have is not None:
                steps.append(
                    Step(
                        StepKind.REMOVE,
                        f"remove {src.DEBIAN_NONFREE_SOURCES} (the node's own sources carry non-free now)",
                        f"rm -f {src.DEBIAN_NONFREE_SOURCES}",
                    )
                )
                changed.add(src.DEBIAN_NONFREE_SOURCES)
        steps += key_steps(ctx, cuda, container, rpm_keyed, facts, changed)
        if epel is not None:
            steps += epel_steps(ctx, epel, changed)
        if docker is not None and not docker.available:
            steps.append(unavailable_step("Docker's RHEL repository (containerd.io, docker-ce)", docker.reason))
        keys = {src.CUDA_KEYRING, src.CONTAINER_KEYRING, *(src.rpm_key_path(r.kind) for r in rpm_keyed)}
        touched = changed & (repo_paths | keys | {src.DEBIAN_NONFREE_SOURCES, src.EPEL_REPO_FILE})
        if touched:
            why = "NVIDIA package sources changed" if ctx.deb else "package repositories changed"
            steps.append(refresh_step(not ctx.deb, why))
        return keep_reports(ctx, "nvidia-repos", steps)

    return Layer("nvidia-repos", early_files=files, read_paths=tuple(read), after=after)


def cuda_key_step(ctx: Ctx, cuda: src.Repo) -> Step:
    """cuda-keyring's key put in place, only once it is the pinned key (``spec.repo_keys``: NVIDIA's,
    or the key the spec pins for a re-signing mirror); the step fails, installing nothing, otherwise."""
    a = src.cuda_keyring_artifact(cuda, ctx.spec)
    fingerprint = repository_fingerprint(ctx.spec, src.CUDA_REPO, deb=True)
    if fingerprint is None:
        return unavailable_step("NVIDIA's CUDA repository key", "no fingerprint is pinned for it")
    part = f"{src.CUDA_KEYRING}.part"
    cmd = (
        f'{src.fetch_command(a)} && d=$(mktemp -d) && dpkg-deb -x {quote_path(a.node_path)} "$d" && '
        f'install -m 0644 "$d{src.CUDA_KEYRING}" {part} && rm -rf "$d" && '
        f"{key_check_command(part, fingerprint)} && mv {part} {src.CUDA_KEYRING}"
    )
    return Step(StepKind.KEYRING, f"CUDA repository key {fingerprint} from {a.url} ({src.CUDA_KEYRING})", cmd)


def container_key_step(ctx: Ctx, container: src.Repo) -> Step:
    """The container toolkit repository's key, moved into place only once it is the pinned key."""
    fingerprint = repository_fingerprint(ctx.spec, src.CONTAINER_REPO, deb=True)
    if fingerprint is None:
        return unavailable_step("the container toolkit repository key", "no fingerprint is pinned for it")
    what = f"container toolkit repository key {fingerprint} from {container.key_url}"
    return Step(
        StepKind.KEYRING, what, checked_key_command(container.key_url or "", src.CONTAINER_KEYRING, fingerprint)
    )


def checked_key_command(url: str, dest: str, fingerprint: str) -> str:
    """Fetch the key at ``url`` to ``dest``.part and move it to ``dest`` only once it is exactly the
    key of ``fingerprint`` (a wrong key fails the command and is never put where it is trusted)."""
    part = f"{dest}.part"
    return (
        f"curl -fsSL --retry 3 --connect-timeout 20 -o {part} {quote_path(url)} && "
        f"{key_check_command(part, fingerprint)} && mv {part} {dest}"
    )


def key_steps(
    ctx: Ctx,
    cuda: src.Repo | None,
    container: src.Repo | None,
    rpm_keyed: list[src.Repo],
    facts: LayerFacts,
    changed: set[str],
) -> list[Step]:
    """The repository keys a node lacks, each checked against its pinned fingerprint before use."""
    steps: list[Step] = []
    cuda_key = ctx.deb and cuda is not None and cuda.available and cuda.bundle is None
    if cuda is not None and cuda_key and facts.contents.get(src.CUDA_KEYRING) is None:
        steps.append(cuda_key_step(ctx, cuda))
        changed.add(src.CUDA_KEYRING)
    ctr_key = ctx.deb and container is not None and container.available and container.bundle is None
    if container is not None and ctr_key and facts.contents.get(src.CONTAINER_KEYRING) is None:
        steps.append(container_key_step(ctx, container))
        changed.add(src.CONTAINER_KEYRING)
    for r in rpm_keyed:
        if facts.contents.get(src.rpm_key_path(r.kind)) is None:
            steps.append(rpm_key_step(ctx, r))
            changed.add(src.rpm_key_path(r.kind))
    return steps


def rpm_key_step(ctx: Ctx, repo: src.Repo) -> Step:
    """A RHEL repository's key fetched to a ``.part`` file and moved to where its ``.repo`` file's
    ``gpgkey=file://`` points only once it is exactly the pinned key (``spec.repo_keys``)."""
    fingerprint = repository_fingerprint(ctx.spec, repo.kind, deb=False)
    if fingerprint is None:
        return unavailable_step(f"the {repo.kind} repository key", "no fingerprint is pinned for it")
    dest = src.rpm_key_path(repo.kind)
    cmd = f"install -d -m 0755 /etc/pki/rpm-gpg && {checked_key_command(repo.key_url or '', dest, fingerprint)}"
    return Step(StepKind.KEYRING, f"{repo.kind} repository key {fingerprint} from {repo.key_url} ({dest})", cmd)


def epel_steps(ctx: Ctx, epel: src.Repo, changed: set[str]) -> list[Step]:
    """CodeReady Builder and EPEL 9 on RHEL: Fedora's epel-release upstream, a repo file otherwise."""
    if not epel.available:
        return [unavailable_step("EPEL 9 (dkms, parallel, slurm-devel)", epel.reason)]
    crb = ctx.os.distribution.crb or "true"  # every EL row names its command; others need no EPEL
    if epel.url == src.EPEL_RELEASE_RPM:
        if ctx.host.packages.get("epel-release") is not None:
            return []
        changed.add(src.EPEL_REPO_FILE)
        key = rpm_key_step(ctx, src.Repo(src.EPEL_REPO, key_url=table.EPEL_GPGKEY))
        if key.command is None:
            return [key]
        # epel-release is installed only signed by the checked key (dnf skips local packages' signatures
        # unless localpkg_gpgcheck is on; the URL's package is a local one once downloaded).
        cmd = (
            f"{key.command} && rpm --import {src.rpm_key_path(src.EPEL_REPO)} && {{ {crb}; }} && "
            f"dnf -y --setopt=localpkg_gpgcheck=1 install {src.EPEL_RELEASE_RPM}"
        )
        return [Step(StepKind.INSTALL, "enable CodeReady Builder and EPEL 9 (epel-release, signed by EPEL's key)", cmd)]
    if src.EPEL_REPO_FILE in changed:
        return [Step(StepKind.INSTALL, "enable CodeReady Builder (EPEL 9 packages need it)", crb)]
    return []
