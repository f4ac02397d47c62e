"""The Kubernetes packages a node gets: pkgs.k8s.io (or its mirror, or the bundle), pinned and held.

Small pure functions, spec in, text out; the facts (URLs, key files, names, version spelling)
are :mod:`gpuforge.spec.k8s_upstream`. One repository per minor: changing ``versions.kubernetes``
to another minor rewrites the source line, and the pin moves the packages to the new patch.
"""

from __future__ import annotations

from gpuforge.render import nvidia_sources as src
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.spec import k8s_upstream as facts
from gpuforge.spec.k8s_day2 import version_tuple
from gpuforge.spec.model import K8S_ROLES, OsFamily, SourceMode, Spec
from gpuforge.spec.nodes import Node

K8S_REPO = "kubernetes"
K8S_LIST = "/etc/apt/sources.list.d/gpuforge-kubernetes.list"
K8S_PIN = "/etc/apt/preferences.d/gpuforge-kubernetes"
K8S_REPO_FILE = "/etc/yum.repos.d/gpuforge-kubernetes.repo"
K8S_REPO_ID = "gpuforge-kubernetes"
#: Armored, as pkgs.k8s.io serves it: apt reads ``.asc`` keyrings, so no gpg is needed on the node.
K8S_KEYRING = "/etc/apt/keyrings/gpuforge-kubernetes.asc"
#: The same key on RHEL nodes, where dnf's ``gpgkey=file://`` reads it: put there only once it is
#: the pinned key, so dnf never imports a key a mirror serves (``gpgkey=<url>`` would).
K8S_RPM_KEY = "/etc/pki/rpm-gpg/gpuforge-kubernetes.asc"


def key_path(os_family: OsFamily) -> str:
    """Where a node keeps pkgs.k8s.io's key (apt's ``signed-by``, dnf's ``gpgkey``)."""
    return K8S_KEYRING if os_family.is_deb else K8S_RPM_KEY


def kubernetes_repo(spec: Spec, os_family: OsFamily) -> src.Repo:
    """pkgs.k8s.io's repository of the spec's minor: upstream, the site mirror
    (``sources.mirrors.kubernetes``, same layout) or the offline bundle's ``apt|rpm/kubernetes/``."""
    deb = os_family.is_deb
    mode = spec.sources.mode
    if mode is SourceMode.OFFLINE:
        return src.bundle_repo(spec, K8S_REPO, os_family)
    if mode is SourceMode.MIRROR:
        mirror = spec.sources.mirrors.kubernetes
        if not mirror:
            return src.Repo(
                K8S_REPO, reason="mirror mode without sources.mirrors.kubernetes: no source for kubelet/kubeadm"
            )
        base = str(mirror).rstrip("/")
    else:
        base = facts.PKGS_K8S_IO
    url = f"{base}/{facts.repo_path(spec.versions.kubernetes, deb)}"
    return src.Repo(K8S_REPO, url=url, key_url=f"{url}/{facts.DEB_KEY_FILE if deb else facts.RPM_KEY_FILE}")


def apt_source_line(repo: src.Repo) -> str:
    """The one-line apt source (install-kubeadm: ``deb [signed-by=...] <url>/ /``)."""
    return src.apt_list_line(repo, K8S_KEYRING)


def apt_pin(version: str) -> str:
    """kubelet, kubeadm and kubectl held at ``version`` (any package revision)."""
    return src.apt_pin(
        " ".join(facts.PACKAGES), facts.deb_version_glob(version), f"Kubernetes {version} (spec versions.kubernetes)"
    )


def dnf_repo_file(repo: src.Repo) -> str:
    """``/etc/yum.repos.d/gpuforge-kubernetes.repo``: upstream's file, with our repo id and the key
    the kubernetes layer put in place once it was the pinned one (``K8S_RPM_KEY``).

    ``exclude=`` keeps ``dnf upgrade`` off the Kubernetes packages; gpuforge installs them
    naming the repository in ``--disableexcludes`` (install-kubeadm, Red Hat-based).
    """
    if repo.url is None:
        raise ValueError(f"{repo.kind}: {repo.reason}")
    lines = [f"[{K8S_REPO_ID}]", "name=Kubernetes (gpuforge)"]
    if repo.bundle is not None:
        key = f"file://{src.BUNDLE_ON_NODE}/{src.BUNDLE_RPM_KEY_FILE}"
        lines += [f"baseurl=file://{repo.url}", "enabled=1", "repo_gpgcheck=1", "gpgcheck=0", f"gpgkey={key}"]
    else:
        lines += [f"baseurl={repo.url}/", "enabled=1", "gpgcheck=1", f"gpgkey=file://{K8S_RPM_KEY}"]
    lines.append(f"exclude={' '.join(facts.RPM_EXCLUDE)}")
    return "\n".join(lines) + "\n"


def package_specs(spec: Spec, node: Node, names: tuple[str, ...] = facts.PACKAGES) -> list[str]:
    """What the package manager is asked for: ``kubelet=1.31.4-*`` (apt) or ``kubelet-1.31.4`` (dnf)."""
    v = spec.versions.kubernetes
    if node.os.is_deb:
        return [f"{p}={facts.deb_version_glob(v)}" for p in names]
    return [facts.rpm_package_spec(p, v) for p in names]


def _upstream(installed: str) -> str:
    return installed.split(":", 1)[-1].split("-", 1)[0]


def version_newer(installed: str, version: str) -> bool:
    """An installed package version is a newer Kubernetes release than ``version``."""
    try:
        return version_tuple(_upstream(installed)) > version_tuple(version)
    except ValueError:
        return False


def version_is(installed: str | None, version: str) -> bool:
    """An installed package version (``1.31.4-1.1``, ``1.31.4-150500.1.1``) is ``version``."""
    return installed is not None and _upstream(installed) == version


def k8s_repo_files(spec: Spec, node: Node) -> list[RenderedFile]:
    """The source list and pin (deb) or repo file (rpm); none where the repository is unavailable."""
    repo = kubernetes_repo(spec, node.os)
    if not repo.available:
        return []
    if node.os.is_deb:
        return [
            RenderedFile(K8S_LIST, apt_source_line(repo)),
            RenderedFile(K8S_PIN, apt_pin(spec.versions.kubernetes)),
        ]
    return [RenderedFile(K8S_REPO_FILE, dnf_repo_file(repo))]


def kubernetes_package_files(spec: Spec, node: Node, secrets: Secrets) -> list[RenderedFile]:
    """The package source and pin of a Kubernetes node (``gpuforge render``); [] elsewhere."""
    del secrets  # no secrets here
    if spec.kubernetes is None or not node.roles & K8S_ROLES:
        return []
    return k8s_repo_files(spec, node)
