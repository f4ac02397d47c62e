"""The key each package repository must be signed with, as a primary key fingerprint.

Upstream mode: the fingerprints cited in ``nvidia_packages`` (NVIDIA's CUDA and container keys,
Docker's RHEL key, EPEL 9's key) and ``k8s_upstream`` (pkgs.k8s.io). Mirror mode: the fingerprint
the spec pins for that mirror (``sources.mirror_keys``, a site that re-signs its mirror), else
upstream's own (a mirror that serves upstream's signed indexes as they are). Offline mode: none
here: the bundle's key is pinned by ``sources.bundle_fingerprint`` and checked by
``gpuforge.bundle.verify`` before any host is touched.

Invariant: no mode accepts whatever key a repository serves beside itself; a key whose
fingerprint is not the one returned here is refused before it checks anything (at bundle
build time, and on the node before the key is moved into place).
"""

from __future__ import annotations

from gpuforge.spec import k8s_upstream
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec.model import SourceMode, Spec

#: Repository kind (``gpuforge.render.nvidia_sources.*_REPO``, ``k8s_packages.K8S_REPO``) -> the
#: ``sources.mirrors`` / ``sources.mirror_keys`` field of its mirror.
MIRROR_SETTING: dict[str, str] = {
    "nvidia-cuda": "nvidia_cuda",
    "nvidia-container": "nvidia_container",
    "epel": "epel",
    "docker-ce": "docker_ce",
    "kubernetes": "kubernetes",
}


def upstream_fingerprint(kind: str, deb: bool) -> str | None:
    """The cited fingerprint of upstream's key for a repository kind and format (None: none known)."""
    if kind == "kubernetes":
        return k8s_upstream.KEY_FINGERPRINT
    return (table.APT_REPO_FINGERPRINTS if deb else table.RPM_REPO_FINGERPRINTS).get(kind)


def repository_fingerprint(spec: Spec, kind: str, deb: bool) -> str | None:
    """The fingerprint a repository's key must have in the spec's source mode (None: offline
    mode, where the bundle key is pinned instead, or no key is known: refuse the repository)."""
    mode = spec.sources.mode
    if mode is SourceMode.OFFLINE:
        return None
    if mode is SourceMode.MIRROR and kind in MIRROR_SETTING:
        pinned: str | None = getattr(spec.sources.mirror_keys, MIRROR_SETTING[kind])
        if pinned is not None:
            return pinned
    return upstream_fingerprint(kind, deb)
