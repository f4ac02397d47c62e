"""Where every NVIDIA-stack package and artifact comes from: small pure functions.

The spec's ``sources.mode`` decides, for each kind of source:

* ``upstream``: NVIDIA's public repositories and GitHub releases (the defaults below);
* ``mirror``: the site mirror URLs in ``sources.mirrors``. Mirror mode means the nodes never
  reach upstream: a component whose mirror is not set has *no source* and is reported as
  unavailable instead of being tried against the internet;
* ``offline``: files from ``sources.bundle_dir`` on the control host, pushed to the nodes
  (``BUNDLE_ON_NODE``) and checked by checksum like every other managed file.

The OS archive (Debian's ``non-free`` driver, build tools, containerd) always comes from the
node's own apt sources, reached through ``sources.apt_proxy`` when one is set.

Release files (``Artifact``) are fetched over https from upstream (a site mirror may be http) and
used only once their sha256 is the one known beforehand (``known_sha256``: the cited table
``gpuforge.spec.artifact_digests`` or the spec's ``sources.artifact_sha256``): the node checks it
before moving a download into place (``fetch_command``); a release file with no known sha256 is
never fetched, in any mode, and its step says how to pin it.

Offline bundle layout (``<bundle_dir>/``): ``artifacts/<file name>`` for release files
(enroot packages, the pyxis tarball, dcgm-exporter, cuda-keyring) and flat package
repositories ``apt/<repo>/`` (``Packages`` index + ``.deb`` files) or ``rpm/<repo>/``
(``repodata/`` + ``.rpm`` files) for ``nvidia-cuda`` and ``nvidia-container``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from dataclasses import dataclass
from functools import cache

from gpuforge.render.aptsources import parse_apt_sources
from gpuforge.render.files import LocalSource
from gpuforge.spec import artifact_digests
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec.model import OsFamily, SourceMode, Spec
from gpuforge.spec.platforms import Platform

CUDA_UPSTREAM = "https://developer.download.nvidia.com/compute/cuda/repos"
CONTAINER_UPSTREAM = "https://nvidia.github.io/libnvidia-container"
ENROOT_RELEASES = "https://github.com/NVIDIA/enroot/releases/download"
PYXIS_TAGS = "https://github.com/NVIDIA/pyxis/archive/refs/tags"

CUDA_KEYRING_DEB = "cuda-keyring_1.1-1_all.deb"
CUDA_KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
# The key NVIDIA signs its CUDA rpm repositories with (file name in the repository).
CUDA_RPM_KEY = "D42D0685.pub"
CUDA_APT_KEY = "3bf863cc.pub"  # the InRelease key beside each deb repository (cuda-repo-key)
CONTAINER_KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.asc"  # armored: no gpg needed

CUDA_LIST = "/etc/apt/sources.list.d/gpuforge-nvidia-cuda.list"
CONTAINER_LIST = "/etc/apt/sources.list.d/gpuforge-nvidia-container.list"
CUDA_REPO_FILE = "/etc/yum.repos.d/gpuforge-nvidia-cuda.repo"
CONTAINER_REPO_FILE = "/etc/yum.repos.d/gpuforge-nvidia-container.repo"
DEBIAN_NONFREE_SOURCES = "/etc/apt/sources.list.d/gpuforge-debian-nonfree.sources"
NODE_APT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/debian.sources")
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
NONFREE_COMPONENTS = ("contrib", "non-free", "non-free-firmware")

BUNDLE_ON_NODE = "/var/lib/gpuforge/bundle"
# The public key of the offline bundle's own signature (its apt/gpuforge-bundle.gpg), on nodes.
BUNDLE_KEYRING = "/etc/apt/keyrings/gpuforge-bundle.gpg"
BUNDLE_KEY_FILE = "apt/gpuforge-bundle.gpg"
BUNDLE_RPM_KEY_FILE = "rpm/gpuforge-bundle.asc"  # the same key armored, for dnf
DOWNLOAD_DIR = "/var/lib/gpuforge/downloads"

CUDA_REPO = "nvidia-cuda"
CONTAINER_REPO = "nvidia-container"
DOCKER_REPO = "docker-ce"
DOCKER_REPO_FILE = "/etc/yum.repos.d/gpuforge-docker-ce.repo"
EPEL_REPO = "epel"
EPEL_REPO_FILE = "/etc/yum.repos.d/gpuforge-epel.repo"
# Fedora's EPEL release package for EL 9 (NVIDIA/ansible-role-nvidia-driver defaults/main.yml: epel_package).
EPEL_RELEASE_RPM = "https://dl.fedoraproject.org/pub/epel/epel-release-latest-9.noarch.rpm"
EPEL_KEY = "RPM-GPG-KEY-EPEL-9"
# CodeReady Builder comes first (EPEL packages depend on it): each EL row of the platform table
# says how its distribution enables it (``Distribution.crb``).


# --------------------------------------------------------------------------- repositories


@dataclass(frozen=True)
class Repo:
    """A package repository as a node uses it, or why there is none.

    ``url`` is the repository base; ``key_url`` where its signing key comes from (None: the
    repository is a pushed offline bundle, signed with the bundle's own key, ``BUNDLE_KEYRING``);
    ``bundle`` the control-host directory whose files are pushed in offline mode.
    """

    kind: str
    url: str | None = None
    key_url: str | None = None
    bundle: str | None = None
    reason: str | None = None

    @property
    def available(self) -> bool:
        return self.url is not None


def bundle_repo(spec: Spec, kind: str, os_family: OsFamily) -> Repo:
    fmt = "apt" if os_family.is_deb else "rpm"
    local = os.path.join(os.path.expanduser(spec.sources.bundle_dir or ""), fmt, kind)
    if not spec.sources.bundle_dir or not os.path.isdir(local):
        return Repo(kind, reason=f"offline mode: the bundle has no {fmt}/{kind}/ repository ({local})")
    return Repo(kind, url=f"{BUNDLE_ON_NODE}/{fmt}/{kind}", bundle=local)


def cuda_repo(spec: Spec, platform: Platform) -> Repo:
    """NVIDIA's CUDA repository (driver, fabric manager, DCGM, mig-manager, CUDA toolkit).

    Upstream it is ``<root>/<distro>/<arch>`` (``ubuntu2404/sbsa``: the platform table). A mirror
    URL may contain ``{distro}`` (``debian12``, ``ubuntu2404``, ...) and ``{arch}`` (``x86_64``,
    ``sbsa``) so that one setting serves clusters with several OS families and architectures.
    """
    distro = platform.distribution.cuda_repo_distro
    if platform.distribution.cuda_repo_refused:
        return Repo(CUDA_REPO, reason=f"{platform.distribution.title}: {platform.distribution.cuda_repo_refused}")
    mode = spec.sources.mode
    if mode is SourceMode.OFFLINE:
        return bundle_repo(spec, CUDA_REPO, platform.os)
    if mode is SourceMode.MIRROR:
        mirror = spec.sources.mirrors.nvidia_cuda
        if not mirror:
            return Repo(
                CUDA_REPO,
                reason="mirror mode without sources.mirrors.nvidia_cuda: no source for NVIDIA's CUDA repository",
            )
        url = mirror.replace("{distro}", distro).replace("{arch}", platform.names.cuda_repo).rstrip("/")
    else:
        url = f"{CUDA_UPSTREAM}/{platform.cuda_repo_path}"
    key = f"{url}/{CUDA_KEYRING_DEB}" if platform.is_deb else f"{url}/{CUDA_RPM_KEY}"
    return Repo(CUDA_REPO, url=url, key_url=key)


def _repo_by_mode(
    spec: Spec,
    kind: str,
    os_family: OsFamily,
    mirror: str | None,
    setting: str,
    what: str,
    key_file: str,
    upstream: Repo,
) -> Repo:
    """A repository by ``sources.mode``: the bundle's ``<fmt>/<kind>/``, the mirror URL of
    ``sources.mirrors.<setting>`` (the repository directory, ``key_file`` beside it), or ``upstream``."""
    mode = spec.sources.mode
    if mode is SourceMode.OFFLINE:
        return bundle_repo(spec, kind, os_family)
    if mode is SourceMode.MIRROR:
        if not mirror:
            return Repo(kind, reason=f"mirror mode without sources.mirrors.{setting}: no source for {what}")
        url = str(mirror).rstrip("/")
        return Repo(kind, url=url, key_url=f"{url}/{key_file}")
    return upstream


def container_repo(spec: Spec, os_family: OsFamily) -> Repo:
    """NVIDIA's libnvidia-container repository (the container toolkit).

    A mirror URL is the repository directory itself (upstream ``.../stable/deb/amd64`` or
    ``.../stable/rpm/x86_64``) with NVIDIA's ``gpgkey`` file beside the index.
    """
    sub = "stable/deb/$(ARCH)" if os_family.is_deb else "stable/rpm/$basearch"
    upstream = Repo(CONTAINER_REPO, url=f"{CONTAINER_UPSTREAM}/{sub}", key_url=f"{CONTAINER_UPSTREAM}/gpgkey")
    mirror = spec.sources.mirrors.nvidia_container
    return _repo_by_mode(
        spec, CONTAINER_REPO, os_family, mirror, "nvidia_container", "the NVIDIA container toolkit", "gpgkey", upstream
    )


def epel_repo(spec: Spec) -> Repo:
    """EPEL 9 (RHEL: dkms for the driver's DKMS streams, enroot's ``parallel``, ``slurm-devel``).

    Upstream: Fedora's ``epel-release`` package (``url`` is the package); mirror: a repo file
    for ``sources.mirrors.epel``; offline: an rpm repository ``rpm/epel/`` placed in the bundle.
    """
    upstream = Repo(EPEL_REPO, url=EPEL_RELEASE_RPM)
    mirror = spec.sources.mirrors.epel
    return _repo_by_mode(spec, EPEL_REPO, OsFamily.RHEL9, mirror, "epel", "EPEL 9", EPEL_KEY, upstream)


def epel_fetch_repo(spec: Spec) -> Repo:
    """EPEL 9 as the offline bundle fetches it: the mirror of ``sources.mirrors.epel`` (key
    ``RPM-GPG-KEY-EPEL-9`` beside it) in mirror mode, else Fedora's repository (epel-repo)."""
    if spec.sources.mode is SourceMode.MIRROR:
        return _repo_by_mode(
            spec, EPEL_REPO, OsFamily.RHEL9, spec.sources.mirrors.epel, "epel", "EPEL 9", EPEL_KEY, Repo(EPEL_REPO)
        )
    return Repo(EPEL_REPO, url=table.EPEL_BASEURL, key_url=table.EPEL_GPGKEY)


def docker_repo(spec: Spec, os_family: OsFamily = OsFamily.RHEL9) -> Repo:
    """Docker's repository for the EL distribution (containerd.io, docker-ce): RHEL's
    (``nvidia_packages.SOURCES['docker-rhel']``) or, for Rocky and Alma, the one the platform
    table names (``platform_sources.SOURCES['docker-el-rebuilds']``: Rocky's docs use centos).

    A mirror URL is the repository directory itself, with Docker's ``gpg`` key beside it.
    """
    distro = f"/linux/{os_family.distribution.docker_repo_distro or 'rhel'}/"
    url = table.DOCKER_RHEL_BASEURL.replace("/linux/rhel/", distro)
    upstream = Repo(DOCKER_REPO, url=url, key_url=table.DOCKER_RHEL_GPGKEY.replace("/linux/rhel/", distro))
    mirror = spec.sources.mirrors.docker_ce
    what = "containerd.io/docker-ce"
    return _repo_by_mode(spec, DOCKER_REPO, OsFamily.RHEL9, mirror, "docker_ce", what, "gpg", upstream)


def apt_list_line(repo: Repo, keyring: str) -> str:
    """One-line apt source for a flat NVIDIA repository (``<url> /``)."""
    if repo.url is None:
        raise ValueError(f"{repo.kind}: {repo.reason}")
    if repo.bundle is not None:  # signed by the bundle's key (gpuforge.bundle.signing)
        return f"deb [signed-by={BUNDLE_KEYRING}] file:{repo.url} ./\n"
    return f"deb [signed-by={keyring}] {repo.url}/ /\n"


def rpm_key_path(kind: str) -> str:
    """Where a repository's key lies on a RHEL node once it was checked against its pinned
    fingerprint (``gpuforge.deploy.layers.nvidia.repos.rpm_key_step``): dnf reads it from there,
    never from the mirror or upstream URL, so it cannot import a key someone else serves."""
    return f"/etc/pki/rpm-gpg/gpuforge-{kind}.asc"


def dnf_repo_file(repo: Repo, name: str, description: str) -> str:
    """A ``/etc/yum.repos.d`` file for an NVIDIA repository."""
    if repo.url is None:
        raise ValueError(f"{repo.kind}: {repo.reason}")
    lines = [f"[{name}]", f"name={description}"]
    key = f"file://{rpm_key_path(repo.kind)}"
    if repo.bundle is not None:  # metadata signed by the bundle's key; it covers every package's checksum
        key = f"file://{BUNDLE_ON_NODE}/{BUNDLE_RPM_KEY_FILE}"
        lines += [f"baseurl=file://{repo.url}", "enabled=1", "repo_gpgcheck=1", "gpgcheck=0", f"gpgkey={key}"]
    elif repo.kind == CONTAINER_REPO:  # as NVIDIA's own .repo file: signed metadata, unsigned packages
        lines += [f"baseurl={repo.url}", "enabled=1", *table.CONTAINER_REPO_DNF_OPTIONS, f"gpgkey={key}"]
    else:
        lines += [f"baseurl={repo.url}", "enabled=1", "gpgcheck=1", f"gpgkey={key}"]
    return "\n".join(lines) + "\n"


@cache
def _bundle_files(directory: str, mtime: float) -> tuple[tuple[str, LocalSource], ...]:
    del mtime  # cache key only
    out = []
    for root, _, names in os.walk(directory, followlinks=False):
        for name in sorted(names):
            full = os.path.join(root, name)
            if not _regular_file(full):  # verify_bundle refuses these before any host is touched
                raise ValueError(f"{full}: not a regular file")
            out.append((os.path.relpath(full, directory), LocalSource(full)))
    return tuple(sorted(out, key=lambda e: e[0]))


def bundle_files(local_dir: str) -> tuple[tuple[str, LocalSource], ...]:
    """(relative path, file) of every file under a bundle directory: streamed to nodes, never read whole."""
    return _bundle_files(local_dir, os.stat(local_dir).st_mtime)


def bundle_key(spec: Spec, deb: bool = True) -> LocalSource | None:
    """The offline bundle's public key on the control host, as apt (binary) or dnf (armored)
    reads it (None: not offline, or no key)."""
    if spec.sources.mode is not SourceMode.OFFLINE or not spec.sources.bundle_dir:
        return None
    path = os.path.join(os.path.expanduser(spec.sources.bundle_dir), BUNDLE_KEY_FILE if deb else BUNDLE_RPM_KEY_FILE)
    return LocalSource(path) if _regular_file(path) else None


def apt_release_key(spec: Spec, repo: Repo) -> tuple[str | None, str | None]:
    """(URL of the key, fingerprint required) to check an apt repository's InRelease with.

    Upstream: NVIDIA's key and its cited fingerprint; a mirror: the key beside it (as the
    nodes use it), any fingerprint (a re-signing mirror has its own).
    """
    if repo.url is None or repo.bundle is not None:
        return None, None
    required = table.APT_REPO_FINGERPRINTS.get(repo.kind) if spec.sources.mode is SourceMode.UPSTREAM else None
    if repo.kind == CUDA_REPO:
        return f"{repo.url}/{CUDA_APT_KEY}", required
    return repo.key_url, required


def rpm_repo_key(spec: Spec, repo: Repo) -> tuple[str | None, str | None]:
    """(URL of the key, fingerprint required) an rpm repository's metadata or packages are
    checked with (upstream: the cited fingerprint where one is known; a mirror: any)."""
    if repo.url is None or repo.bundle is not None:
        return None, None
    required = table.RPM_REPO_FINGERPRINTS.get(repo.kind) if spec.sources.mode is SourceMode.UPSTREAM else None
    return repo.key_url, required


def bundle_files_single(path: str | None) -> LocalSource:
    """One bundle file (streamed to nodes, however many push it)."""
    if path is None:
        raise ValueError("no bundle file")
    if not _regular_file(path):
        raise ValueError(f"{path}: not a regular file")
    return LocalSource(path)


# --------------------------------------------------------------------------- Debian non-free


def debian_nonfree_sources(node_sources: list[str], suite: str, mirror: str | None = None) -> str | None:
    """deb822 text enabling ``contrib non-free non-free-firmware``, or None when not needed.

    The node keeps its own Debian archive (``mirror`` overrides it): the file repeats each
    of the node's ``<suite>``, ``<suite>-updates`` and ``<suite>-security`` sources that
    lacks those components, with only the missing components. None when every such source
    already has them (or the node names no Debian source and no mirror is given).
    """
    entries = [e for text in node_sources for e in parse_apt_sources(text)]
    have: dict[tuple[str, str], set[str]] = {}
    for e in entries:
        if not e.uri.startswith(("http://", "https://", "file:")):
            continue
        for s in e.suites:
            if s in (suite, f"{suite}-updates", f"{suite}-security"):
                have.setdefault((e.uri, s), set()).update(e.components)
    targets = list(have)
    if mirror:
        uri = mirror.rstrip("/")
        targets = [(uri, suite), (uri, f"{suite}-updates")] + [t for t in have if t[1].endswith("-security")]
    stanzas: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for uri, s in targets:
        comps = have.get((uri, s), set())
        missing = tuple(c for c in NONFREE_COMPONENTS if c not in comps)
        if missing:
            stanzas.setdefault((uri, missing), []).append(s)
    if not stanzas:
        return None
    blocks = [
        f"Types: deb\nURIs: {uri}\nSuites: {' '.join(suites)}\n"
        f"Components: {' '.join(missing)}\nSigned-By: {DEBIAN_KEYRING}\n"
        for (uri, missing), suites in sorted(stanzas.items())
    ]
    return "# Managed by gpuforge: Debian's NVIDIA driver is in contrib/non-free.\n" + "\n".join(blocks)


# --------------------------------------------------------------------------- apt pins


def apt_pin(packages: str, version_glob: str, why: str) -> str:
    """One apt preferences stanza holding ``packages`` at versions matching ``version_glob``.

    ``Explanation:`` lines carry the managed-file note (preferences files have no comments).
    """
    return (
        "Explanation: Managed by gpuforge: edit the cluster spec, not this file.\n"
        f"Explanation: {why}\nPackage: {packages}\nPin: version {version_glob}\nPin-Priority: 1001\n"
    )


# Every binary package of NVIDIA's driver source packages (Debian, Ubuntu and CUDA repository
# names); the pin only applies to versions that match, so other NVIDIA packages are unaffected.
DRIVER_PIN_PACKAGES = "*nvidia* libcuda* libnvcuvid* libnvoptix* libxnvctrl* cuda-drivers*"


def driver_pin(version: str) -> str:
    """``/etc/apt/preferences.d/gpuforge-nvidia-driver``: the driver (and fabric manager) at the pin."""
    return apt_pin(DRIVER_PIN_PACKAGES, f"{version}-*", f"NVIDIA driver {version} (spec versions.driver)")


def dcgm_pin(version: str) -> str:
    """DCGM 4 packages at the pinned version (NVIDIA's packages carry epoch 1)."""
    return (
        apt_pin("datacenter-gpu-manager-4-*", f"1:{version}-*", f"DCGM {version}")
        + "\n"
        + apt_pin("datacenter-gpu-manager-4-*", f"{version}-*", f"DCGM {version}")
    )


def dcgm_exporter_pin(release: str) -> str:
    """dcgm-exporter's package at the exporter half of ``versions.dcgm_exporter`` (nvidia_packages
    ``dcgm-exporter-install``: the package version is the exporter's)."""
    ver = table.dcgm_exporter_package_version(release)
    return apt_pin(table.DCGM_EXPORTER_PACKAGE, f"{ver}-*", f"dcgm-exporter {release} (package {ver})")


def version_matches(installed: str | None, version: str) -> bool:
    """True when a package version (``[epoch:]upstream-revision``) is ``version``."""
    if installed is None:
        return False
    upstream = installed.split(":", 1)[1] if re.match(r"^\d+:", installed) else installed
    return upstream == version or upstream.startswith(f"{version}-")


# --------------------------------------------------------------------------- artifacts


#: What stands in for a digest of cuda-keyring: the key it carries is checked before it is trusted.
CUDA_KEYRING_CHECK = "the key it carries, moved into place only once its fingerprint is the pinned one"


@dataclass(frozen=True)
class Artifact:
    """A release file: fetched on the node from ``url``, or pushed from ``local`` (offline).

    Invariant: ``available`` needs a source, no ``reason`` and a ``sha256`` (or ``verified_by``: the
    check that stands in for one, where gpuforge checks what the file carries instead), so nothing
    unchecked is ever fetched or pushed. ``artifact()`` gives every release file whose sha256 it does
    not know a ``reason`` naming the file and how to pin its sha256.
    """

    name: str
    url: str | None = None
    local: str | None = None
    sha256: str | None = None
    reason: str | None = None
    verified_by: str | None = None
    sha256_from: str | None = None
    """Where ``sha256`` is known from (``digest_source``), for the bundle's manifest."""

    @property
    def available(self) -> bool:
        has_source = self.url is not None or self.local is not None
        return self.reason is None and has_source and (self.sha256 is not None or self.verified_by is not None)

    @property
    def node_path(self) -> str:
        """Where the file lies on the node before it is installed."""
        return f"{BUNDLE_ON_NODE if self.local else DOWNLOAD_DIR}/{self.name}"


def bundle_manifest_sha256(bundle_dir: str, rel_path: str) -> str | None:
    """The sha256 a bundle's manifest records for one of its files (None if not listed)."""
    path = os.path.join(bundle_dir, "manifest.json")
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return None
    return _manifest_sums(path, stamp).get(rel_path)


@cache
def _manifest_sums(path: str, stamp: int) -> dict[str, str]:
    del stamp  # cache key only: a rewritten manifest is read again
    try:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f).get("files", [])
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(e.get("path")): str(e.get("sha256")) for e in entries if isinstance(e, dict) and e.get("sha256")}


def _regular_file(path: str) -> bool:
    """A regular file itself, not through a symbolic link (a link could point at /dev/zero)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def known_sha256(spec: Spec, name: str) -> str | None:
    """The sha256 the release file ``name`` must have: the spec's pin (``sources.artifact_sha256``),
    else the cited table (``gpuforge.spec.artifact_digests``); None when neither knows it."""
    pinned = spec.sources.artifact_sha256.get(name)
    if pinned is not None:
        return pinned
    known = artifact_digests.known_digest(name)
    return known.sha256 if known is not None else None


def digest_source(spec: Spec, name: str) -> str | None:
    """Where ``known_sha256`` of ``name`` comes from, in words (None: it is not known)."""
    if name in spec.sources.artifact_sha256:
        return "pinned in the spec (sources.artifact_sha256)"
    known = artifact_digests.known_digest(name)
    if known is None:
        return None
    return f"gpuforge's table: {artifact_digests.SOURCES[known.source].title} at {known.commit}"


def _unavailable(name: str, sha: str | None, why: str, sha_from: str | None = None) -> Artifact:
    """An artifact with no source; the reason also says how to pin its sha256 when none is known."""
    if sha is None:
        why += f"; and {artifact_digests.pin_hint(name)}"
    return Artifact(name, sha256=sha, reason=why, sha256_from=sha_from)


def _no_digest(name: str, url: str | None = None) -> Artifact:
    reason = f"no sha256 is known for {name}, so gpuforge never uses it: {artifact_digests.pin_hint(name)}"
    return Artifact(name, url=url, reason=reason)


def _bundled_artifact(spec: Spec, name: str, sha: str | None) -> Artifact:
    """Offline: the bundle's ``artifacts/<name>``, pushed only when it is a regular file that the
    bundle's manifest lists with the known sha256 (the node checks the pushed file against it too)."""
    bundle = os.path.expanduser(spec.sources.bundle_dir or "")
    local = os.path.join(bundle, "artifacts", name)
    if not spec.sources.bundle_dir or not _regular_file(local):
        return _unavailable(name, sha, f"offline mode: {local} is not in the bundle (as a regular file)")
    listed = bundle_manifest_sha256(bundle, f"artifacts/{name}")
    if listed is None:
        # Never pushed unchecked: a file the manifest does not list may have been put or replaced by anyone.
        return _unavailable(name, sha, f"offline mode: artifacts/{name} is not in the bundle's manifest")
    if sha is None:
        return _no_digest(name)
    if listed != sha:
        return Artifact(name, sha256=sha, reason=f"offline mode: the manifest's sha256 of {name} is not {sha}")
    return Artifact(name, local=local, sha256=sha, sha256_from=digest_source(spec, name))


def artifact(spec: Spec, name: str, upstream: str | None) -> Artifact:
    """A release file from upstream (https: tests/nvidia/test_artifact_digests.py checks every
    upstream URL), the artifacts mirror or the offline bundle, with the sha256 it must have
    (``known_sha256``); without one it is unavailable in every mode."""
    sha, sha_from = known_sha256(spec, name), digest_source(spec, name)
    mode = spec.sources.mode
    if mode is SourceMode.OFFLINE:
        return _bundled_artifact(spec, name, sha)
    if mode is SourceMode.MIRROR:
        base = spec.sources.mirrors.artifacts
        if not base:
            why = f"mirror mode without sources.mirrors.artifacts: no source for {name}"
            return _unavailable(name, sha, why, sha_from)
        url = f"{base.rstrip('/')}/{name}"
    elif upstream is None:
        why = f"{name} has no upstream download: set sources.mirrors.artifacts or use a bundle"
        return _unavailable(name, sha, why, sha_from)
    else:
        url = upstream
    if sha is None:
        return _no_digest(name, url)
    return Artifact(name, url=url, sha256=sha, sha256_from=sha_from)


def enroot_artifacts(spec: Spec, platform: Platform) -> list[Artifact]:
    """enroot and enroot+caps packages of ``versions.enroot`` for the platform's architecture."""
    ver, arch = spec.versions.enroot, platform.package_arch
    if platform.is_deb:
        names = [f"enroot_{ver}-1_{arch}.deb", f"enroot+caps_{ver}-1_{arch}.deb"]
    else:
        names = [f"enroot-{ver}-1.el8.{arch}.rpm", f"enroot+caps-{ver}-1.el8.{arch}.rpm"]
    return [artifact(spec, n, f"{ENROOT_RELEASES}/v{ver}/{n}") for n in names]


def pyxis_artifact(spec: Spec) -> Artifact:
    """The pyxis source tarball of ``versions.pyxis``."""
    ver = spec.versions.pyxis
    return artifact(spec, f"pyxis-{ver}.tar.gz", f"{PYXIS_TAGS}/v{ver}.tar.gz")


def mig_manager_artifact(spec: Spec, platform: Platform) -> Artifact:
    """nvidia-mig-manager of ``versions.mig_manager``: a release file of NVIDIA/mig-parted, not a
    CUDA-repository package (``nvidia_packages.SOURCES['mig-parted-releases']``)."""
    ver = spec.versions.mig_manager
    name = table.mig_manager_file(ver, platform)
    return artifact(spec, name, f"{table.MIG_PARTED_RELEASES}/v{ver}/{name}")


def cuda_keyring_artifact(repo: Repo, spec: Spec | None = None) -> Artifact:
    """cuda-keyring from the CUDA repository (upstream or mirror) it signs.

    No sha256 of it is published (``artifact_digests.UNPUBLISHED``): what gpuforge takes from it is
    its key, which is moved into place only once its fingerprint is the pinned one
    (``CUDA_KEYRING_CHECK``, ``gpuforge.spec.repo_keys``). A sha256 the spec pins is checked first.
    """
    sha = known_sha256(spec, CUDA_KEYRING_DEB) if spec is not None else None
    return Artifact(CUDA_KEYRING_DEB, url=repo.key_url, sha256=sha, verified_by=CUDA_KEYRING_CHECK)


def sha256_check(sha256: str, path: str) -> str:
    """``sha256sum -c`` of one file on the node: fails (printing ``<path>: FAILED``) unless it matches."""
    return f"echo {shlex.quote(f'{sha256}  {path}')} | sha256sum -c --quiet -"


def fetch_command(a: Artifact) -> str:
    """Shell command leaving ``a`` at ``a.node_path``, checked before anything uses it.

    A download lands beside its place (``.part``) and is moved there only once its sha256 is
    ``a.sha256``; a mismatch removes it and fails the command, so a bad file never lies where the
    install step takes it. A pushed bundle file is checked in place. Invariant: when the command
    succeeds, ``a.node_path`` holds the bytes of ``a.sha256`` (an artifact ``verified_by`` another
    check and with no sha256: the bytes as served, for that check to run next). Raises ValueError
    for an artifact that is not available.
    """
    if not a.available:
        raise ValueError(f"{a.name}: {a.reason or 'no known sha256'}")
    dest = shlex.quote(a.node_path)
    if a.local is not None:
        return f"test -s {dest}" + (f" && {sha256_check(a.sha256, a.node_path)}" if a.sha256 else "")
    part = shlex.quote(f"{a.node_path}.part")
    cmd = (
        f"install -d -m 0755 {DOWNLOAD_DIR} && "
        f"curl -fsSL --retry 3 --connect-timeout 20 -o {part} {shlex.quote(a.url or '')}"
    )
    if a.sha256:
        refused = shlex.quote(f"gpuforge: {a.name} is not the file of sha256 {a.sha256}: removed, not used")
        check = sha256_check(a.sha256, f"{a.node_path}.part")
        cmd += f" && {{ {check} || {{ echo {refused} >&2; rm -f {part}; false; }}; }}"
    return f"{cmd} && mv {part} {dest}"
